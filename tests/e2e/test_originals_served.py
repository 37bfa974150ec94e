"""Originals are sent from disk a chunk at a time, over a real uvicorn: slow readers cost little."""

import hashlib
import io
import random
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from PIL import Image

from tests.e2e.wire import MB, limited, status_kib
from tests.processes import Stack, Template, Web

READERS = 20  # connections that ask for the original and read nothing


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, template: Template
) -> Iterator[tuple[Web, Stack, Path, str, int]]:
    with limited(tmp_path_factory.mktemp("originals"), template) as served:
        yield served


def big_png() -> bytes:
    """Return a PNG of about 20 MB: noise, stored without compression."""
    side = 2600
    noise = random.Random(3).randbytes(side * side * 3)
    out = io.BytesIO()
    Image.frombytes("RGB", (side, side), noise).save(out, "PNG", compress_level=0)
    return out.getvalue()


def upload(api: httpx.Client, subject_id: int, photo: bytes) -> dict:
    """Upload `photo` as a reference photo through the API; return the asset it became."""
    answer = api.post(
        f"/api/v1/subjects/{subject_id}/references",
        files={"file": ("big.png", photo, "image/png")},
    )
    assert answer.status_code == 201, answer.text[:500]
    return answer.json()


def ask_and_never_read(web: Web, path: str, token: str, window: int = 4096) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", web.port), timeout=10)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, window)
    sock.sendall(
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{web.port}\r\n"
        f"Authorization: Bearer {token}\r\n\r\n".encode()
    )
    return sock


def test_readers_that_read_nothing_do_not_each_hold_the_original_in_memory(served):
    """Found by a review: forty of them held 882 MB of a web process, a 25 MB copy each."""
    _web, stack, _spool, token, subject_id = served
    photo = big_png()
    assert len(photo) > 19 * MB, len(photo)
    web = Web(stack)  # a process of its own: its memory is these readers'
    try:
        with httpx.Client(base_url=web.url, timeout=120) as api:
            api.headers["Authorization"] = f"Bearer {token}"
            path = f"/api/v1/assets/{upload(api, subject_id, photo)['id']}/original"
            assert api.get(path).status_code == 200  # sent once: the code paths are warm
            idle = status_kib(web.proc.pid, "VmRSS")
            readers = [ask_and_never_read(web, path, token) for _ in range(READERS)]
            time.sleep(3)  # every answer started and stopped at its reader's full socket
            held = status_kib(web.proc.pid, "VmRSS")
            whole = api.get(path)
            for reader in readers:
                reader.close()
    finally:
        web.stop()

    grown = (held - idle) / 1024
    bound = 64  # MiB: a few chunks per reader and the sockets' buffers, not a copy each
    assert grown < bound, (
        f"{READERS} readers of a {len(photo) / MB:.0f} MiB original that read nothing took "
        f"the web process from {idle / 1024:.0f} to {held / 1024:.0f} MiB "
        f"(bound: {bound} MiB more; a copy each would be {READERS * len(photo) / MB:.0f})"
    )
    assert whole.status_code == 200
    assert hashlib.sha256(whole.content).hexdigest() == hashlib.sha256(photo).hexdigest()
    assert whole.headers["Content-Length"] == str(len(photo))


def read_until_closed(sock: socket.socket) -> bytes:
    """Read what the server sends until it closes the connection (or stops for 10 s)."""
    got = bytearray()
    try:
        while chunk := sock.recv(1 << 20):
            got += chunk
    except TimeoutError:
        pass
    return bytes(got)


def test_an_original_changed_on_disk_while_it_is_sent_is_never_sent_whole(served):
    """Found by a review: the hash was checked before the send, and bytes written over the
    file in place during it went out as a complete 200 under the right ETag, which a
    browser keeps for a year. A body that does not hash to its name is cut short."""
    web, stack, _spool, token, subject_id = served
    photo = big_png()
    with httpx.Client(base_url=web.url, timeout=120) as api:
        api.headers["Authorization"] = f"Bearer {token}"
        asset = upload(api, subject_id, photo)
        path = f"/api/v1/assets/{asset['id']}/original"
        [stored] = (stack.data_dir / "originals").glob(f"{asset['sha256']}.*")

        sock = ask_and_never_read(web, path, token, window=64 * 1024)
        try:
            head = sock.recv(4096)  # the answer has started: its status line is out
            assert head.startswith(b"HTTP/1.1 200"), head[:100]
            with stored.open("r+b") as file:  # its last 1,000 bytes changed in place
                file.seek(len(photo) - 1000)
                file.write(bytes(1000))
            body = (head + read_until_closed(sock)).split(b"\r\n\r\n", 1)[1]
        finally:
            sock.close()
        after = api.get(path)

    assert len(body) < len(photo), (
        f"all {len(body)} bytes of a body that no longer hashes to its name were sent"
    )
    assert after.status_code == 503, after.text[:200]
