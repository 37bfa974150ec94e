"""Bodies are capped before anything reads them, over a real uvicorn (the README's way)."""

import contextlib
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.processes import Stack, Template, Web, new_stack, simulator

MB = 1024 * 1024
HUGE = 300 * MB
TOKEN_SEED = """
from django.contrib.auth.models import User
from studio import engine
from studio.api.auth import issue_token
subject = engine.create_subject(name="Ada")
ada = User.objects.create_user("ada", password="x" * 12)
result = [issue_token(user=ada), subject.pk, issue_token(user=ada, read_only=True)]
"""


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, template: Template
) -> Iterator[tuple[Web, Stack, Path, str, int]]:
    # One install for the module: `stack` is per test, and every test here reads one server.
    tmp = tmp_path_factory.mktemp("limits")
    with simulator(tmp / "sim") as sim:
        stack = new_stack(template, tmp / "install", sim)
        token, subject_id, read_only = stack.django(TOKEN_SEED)
        stack.env["READ_ONLY_TOKEN"] = read_only  # for the test that needs it
        spool = tmp / "spool"  # the web process's temporary files land here
        spool.mkdir()
        web = Web(stack, TMPDIR=str(spool))
        try:
            yield web, stack, spool, token, subject_id
        finally:
            web.stop()


def spooled_bytes(spool: Path) -> int:
    return sum(p.stat().st_size for p in spool.rglob("*") if p.is_file())


def post_raw(web: Web, path: str, headers: dict[str, str], send_first: int) -> tuple[str, float]:
    """Send headers and `send_first` bytes of body, then wait for the answer.

    Returns the status line and the seconds from the headers' sending to the answer.
    """
    with socket.create_connection(("127.0.0.1", web.port), timeout=10) as sock:
        head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        started = time.perf_counter()
        sock.sendall(head.encode())
        # The server may answer and close without reading: that is what we want.
        with contextlib.suppress(OSError):
            sock.sendall(b"\0" * send_first)
        answer = sock.recv(65536).decode("latin-1")
        return answer.split("\r\n", 1)[0], time.perf_counter() - started


def test_a_300_mb_post_without_a_token_is_answered_at_once_and_spools_nothing(served):
    web, _stack, spool, _token, subject_id = served

    status, seconds = post_raw(
        web,
        f"/api/v1/subjects/{subject_id}/references",
        {"Content-Length": str(HUGE), "Content-Type": "multipart/form-data; boundary=x"},
        send_first=64 * 1024,
    )

    assert status.split()[1] in ("401", "413"), status
    assert seconds < 1.0, f"answered after {seconds:.2f} s (bound: 1 s)"
    assert spooled_bytes(spool) < 2 * MB, f"{spooled_bytes(spool)} bytes spooled (bound: 2 MB)"


def test_an_api_body_without_a_valid_token_gets_its_401_before_it_is_read(served):
    web, _stack, spool, _token, subject_id = served

    for authorization in ({}, {"Authorization": "Bearer not-a-token"}):
        status, seconds = post_raw(
            web,
            f"/api/v1/subjects/{subject_id}/references",
            {"Content-Length": str(20 * MB), **authorization},
            send_first=64 * 1024,  # far less than it announced: nobody waits for the rest
        )
        assert status.split()[1] == "401", status
        assert seconds < 1.0, f"401 after {seconds:.2f} s (bound: 1 s)"
    assert spooled_bytes(spool) < 2 * MB, f"{spooled_bytes(spool)} bytes spooled (bound: 2 MB)"


def test_a_length_over_the_limit_is_refused_with_413_even_with_a_token(served):
    web, _stack, _spool, token, subject_id = served

    status, seconds = post_raw(
        web,
        f"/api/v1/subjects/{subject_id}/references",
        {"Content-Length": str(HUGE), "Authorization": f"Bearer {token}"},
        send_first=0,
    )

    assert status.split()[1] == "413", status
    assert seconds < 1.0, f"413 after {seconds:.2f} s (bound: 1 s)"


def test_a_streamed_body_is_cut_off_once_it_passes_the_limit(served):
    web, _stack, spool, token, subject_id = served
    limit = 25 * MB + MB  # the default: the image cap plus 1 MiB
    sent = 0
    with socket.create_connection(("127.0.0.1", web.port), timeout=10) as sock:
        sock.sendall(
            (
                f"POST /api/v1/subjects/{subject_id}/references HTTP/1.1\r\nHost: x\r\n"
                f"Authorization: Bearer {token}\r\nTransfer-Encoding: chunked\r\n"
                "Content-Type: multipart/form-data; boundary=x\r\n\r\n"
            ).encode()
        )
        chunk = b"\0" * (256 * 1024)
        framed = f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"
        answer = b""
        sock.settimeout(0.05)
        while sent < HUGE and not answer:
            try:
                sock.sendall(framed)
                sent += len(chunk)
            except OSError:
                break  # the server closed the connection after answering
            try:
                answer = sock.recv(65536)
            except TimeoutError:
                continue
        sock.settimeout(5)
        answer = answer or sock.recv(65536)

    assert answer.split(b"\r\n", 1)[0].split()[1] == b"413", answer[:200]
    assert sent < limit + 16 * MB, f"the server read {sent / MB:.0f} MB before answering"
    assert spooled_bytes(spool) < 2 * MB, f"{spooled_bytes(spool)} bytes left spooled"


def test_a_read_only_token_gets_its_403_before_the_body_is_read(served):
    web, stack, spool, _token, subject_id = served

    status, seconds = post_raw(
        web,
        f"/api/v1/subjects/{subject_id}/references",
        {"Content-Length": str(20 * MB), "Authorization": f"Bearer {stack.env['READ_ONLY_TOKEN']}"},
        send_first=64 * 1024,
    )

    assert status.split()[1] == "403", status
    assert seconds < 1.0, f"403 after {seconds:.2f} s (bound: 1 s)"
    assert spooled_bytes(spool) < 2 * MB, f"{spooled_bytes(spool)} bytes spooled (bound: 2 MB)"
