"""The wire, for the tests over a real uvicorn that send bodies a client library would not.

`limited` starts one install's server for a module, with a person, a subject and two
tokens; the rest send requests byte by byte and read what comes back.
"""

import contextlib
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from tests.processes import Stack, Template, Web, new_stack, simulator

MB = 1024 * 1024
TOKEN_SEED = """
from django.contrib.auth.models import User
from studio import engine
from studio.api.auth import issue_token
subject = engine.create_subject(name="Ada")
ada = User.objects.create_user("ada", password="x" * 12)
result = [issue_token(user=ada), subject.pk, issue_token(user=ada, read_only=True)]
"""


@contextlib.contextmanager
def limited(
    tmp: Path, template: Template, **env: str
) -> Iterator[tuple[Web, Stack, Path, str, int]]:
    """Serve one install; yield its server, stack, spool folder, token and subject id.

    The stack's `READ_ONLY_TOKEN` holds a read-only token of the same person (ada); the
    web process's temporary files land in the spool folder.
    """
    with simulator(tmp / "sim") as sim:
        stack = new_stack(template, tmp / "install", sim)
        token, subject_id, read_only = stack.django(TOKEN_SEED)
        stack.env["READ_ONLY_TOKEN"] = read_only  # for the tests that need it
        spool = tmp / "spool"
        spool.mkdir()
        web = Web(stack, TMPDIR=str(spool), **env)
        try:
            yield web, stack, spool, token, subject_id
        finally:
            web.stop()


def status_kib(pid: int, field: str) -> int:
    """Return a field of /proc/<pid>/status in KiB (VmRSS: now; VmHWM: the peak so far)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise AssertionError(f"/proc/{pid}/status has no {field}")


def post_form_page(web: Web, path: str, headers: dict[str, str]) -> tuple[str, str, str]:
    """Post 64 KB of a studio form's body with `headers` and read the whole answer.

    Returns its status line, the rest (headers and page) and the whole answer.
    """
    with socket.create_connection(("127.0.0.1", web.port), timeout=10) as sock:
        head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{web.port}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        sock.sendall(head.encode() + b"\0" * (64 * 1024))
        received = b""
        while chunk := sock.recv(65536):  # the page may follow in a packet of its own
            received += chunk
    answer = received.decode()
    status, rest = answer.split("\r\n", 1)
    return status, rest, answer


def spooled_bytes(spool: Path) -> int:
    return sum(p.stat().st_size for p in spool.rglob("*") if p.is_file())


def post_raw(
    web: Web, path: str, headers: dict[str, str], send_first: int, *, method: str = "POST"
) -> tuple[str, float]:
    """Send headers and `send_first` bytes of body, then wait for the answer.

    Returns the status line and the seconds from the headers' sending to the answer.
    """
    with socket.create_connection(("127.0.0.1", web.port), timeout=10) as sock:
        head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        started = time.perf_counter()
        sock.sendall(head.encode())
        # The server may answer and close without reading: that is what we want.
        with contextlib.suppress(OSError):
            sock.sendall(b"\0" * send_first)
        answer = sock.recv(65536).decode("latin-1")
        return answer.split("\r\n", 1)[0], time.perf_counter() - started


def answer_to(web: Web, path: str, headers: dict[str, str], body: bytes) -> str:
    """Send a POST with `body`, its head first; return the whole answer as text."""
    with socket.create_connection(("127.0.0.1", web.port), timeout=10) as sock:
        head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        sock.sendall(head.encode())
        with contextlib.suppress(OSError):  # the server may answer and close without reading
            sock.sendall(body)
        received = b""
        with contextlib.suppress(ConnectionResetError):
            while chunk := sock.recv(65536):
                received += chunk
        return received.decode("latin-1")


def chunked_upload(web: Web, path: str, headers: dict[str, str], field: str, photo: bytes) -> str:
    """Send `photo` as the multipart form's `field` in chunks (no Content-Length).

    Returns the answer as text.
    """
    boundary = "photo-boundary"
    form = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="{field}"; filename="a.png"\r\n'
            f"Content-Type: image/png\r\n\r\n"
        ).encode()
        + photo
        + f"\r\n--{boundary}--\r\n".encode()
    )
    with socket.create_connection(("127.0.0.1", web.port), timeout=10) as sock:
        head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n"
        head += f"Content-Type: multipart/form-data; boundary={boundary}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        sock.sendall(head.encode())
        with contextlib.suppress(OSError):  # the server may answer before the body is sent
            for start in range(0, len(form), 64 * 1024):
                piece = form[start : start + 64 * 1024]
                sock.sendall(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            sock.sendall(b"0\r\n\r\n")
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
            if b"\r\n\r\n" in received and b"connection: close" not in received.lower():
                break  # kept alive: the answer's head and (small) body are in
        return received.decode("latin-1")


def signed_in_cookies(web: Web) -> dict[str, str]:
    """Sign in as the module's person through the sign-in form; return the session's cookies."""
    with httpx.Client(base_url=web.url) as browser:
        page = browser.get("/accounts/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
        assert token, page.text[:500]
        answer = browser.post(
            "/accounts/login/",
            data={"username": "ada", "password": "x" * 12, "csrfmiddlewaretoken": token[1]},
        )
        assert answer.status_code == 302, answer.text[:500]
        return dict(browser.cookies)
