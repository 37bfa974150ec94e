"""What the ASGI door answers about a body itself, over a real uvicorn: a read-only token's
method a route does not take, an upload sent in chunks, JSON past its limit, the spool."""

import contextlib
import json
import socket
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.wire import MB, answer_to, chunked_upload, signed_in_cookies, spooled_bytes
from tests.factories import png_bytes

NO_BATCH = "/api/v1/batches/6f1c8a52-1f0a-4a57-9d0c-0b0a3c7e5d11"
NO_TASK = "/api/v1/tasks/6f1c8a52-1f0a-4a57-9d0c-0b0a3c7e5d11"


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("DELETE", "/api/v1/subjects", "GET, POST"),
        ("PUT", NO_BATCH, "GET"),
        ("PATCH", NO_TASK, "GET"),
        ("POST", "/api/v1/openapi.json", "GET"),
    ],
)
def test_a_read_only_token_gets_405_first_for_a_method_a_route_does_not_take_with_a_body(
    served, method, path, allow
):
    """Found by a review: with a body the answer was 403 read_only, without one 405."""
    web, stack, _spool, _token, _subject_id = served
    headers = {"Authorization": f"Bearer {stack.env['READ_ONLY_TOKEN']}"}

    answer = httpx.request(method, f"{web.url}{path}", content=b"{}", headers=headers)

    assert answer.status_code == 405, answer.text
    assert answer.headers["Allow"] == allow
    assert answer.json()["error"]["code"] == "method_not_allowed"


def test_a_read_only_token_posting_to_a_path_the_api_does_not_have_gets_404(served):
    web, stack, _spool, _token, _subject_id = served
    headers = {"Authorization": f"Bearer {stack.env['READ_ONLY_TOKEN']}"}

    answer = httpx.post(f"{web.url}/api/v1/no-such-route", content=b"{}", headers=headers)

    assert answer.status_code == 404, answer.text
    assert answer.json()["error"]["code"] == "not_found"


JSON_LIMIT = "the limit is 2.5 MB for JSON and form fields; 26 MB for an upload"


@pytest.mark.parametrize("framing", ["Content-Length", "chunked"])
def test_a_json_body_past_its_limit_is_refused_with_the_limit_it_passed(served, framing):
    """Found by a review: 3 MB of JSON got "The request body is too large." naming no limit,
    while the documented limit was 26 MB."""
    web, _stack, _spool, token, _subject_id = served
    body = json.dumps({"name": "x" * (3 * MB)}).encode()
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    if framing == "chunked":
        headers["Transfer-Encoding"] = "chunked"
        body = f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"
    else:
        headers["Content-Length"] = str(len(body))

    answer = answer_to(web, "/api/v1/subjects", headers, body)

    assert answer.split("\r\n", 1)[0].split()[1] == "413", answer[:300]
    error = json.loads(answer.split("\r\n\r\n", 1)[1])["error"]
    assert error == {
        "code": "too_large",
        "message": f"The request body is too large ({JSON_LIMIT}).",
    }


@pytest.mark.parametrize("size", ["small", "past the cap"])
def test_a_chunked_upload_to_the_api_is_asked_for_its_length(served, size):
    """Found by a review: a valid PNG sent in chunks was "Send the photo as the multipart
    field `file`."; one past the cap said the same, not that it was too large."""
    web, _stack, _spool, token, subject_id = served
    photo = png_bytes(41) if size == "small" else b"\0" * (27 * MB)

    answer = chunked_upload(
        web,
        f"/api/v1/subjects/{subject_id}/references",
        {"Authorization": f"Bearer {token}"},
        "file",
        photo,
    )

    status, rest = answer.split("\r\n", 1)
    assert status.split()[1] == "411", answer[:300]
    body = json.loads(rest.split("\r\n\r\n", 1)[1])
    assert body["error"]["code"] == "length_required"
    assert "Content-Length" in body["error"]["message"]


def test_a_chunked_upload_from_the_studio_is_asked_for_its_length_not_its_csrf_token(served):
    web, _stack, _spool, _token, subject_id = served
    cookie = "; ".join(f"{k}={v}" for k, v in signed_in_cookies(web).items())

    answer = chunked_upload(
        web, f"/subjects/{subject_id}/", {"Cookie": cookie}, "photo", png_bytes(42)
    )

    assert answer.split("\r\n", 1)[0].split()[1] == "411", answer[:300]
    assert "Content-Length" in answer
    assert "could not be sent" not in answer


def both_framings_then_another(web, path: str, headers: dict[str, str], photo: bytes) -> bytes:
    """Send `photo` as a multipart upload framed both ways (Content-Length: 5 and chunked),
    a GET of the API's subjects pipelined right behind it; return all the server sent."""
    boundary = "photo-boundary"
    form = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.png"\r\n'
            "Content-Type: image/png\r\n\r\n"
        ).encode()
        + photo
        + f"\r\n--{boundary}--\r\n".encode()
    )
    extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\n"
        f"Transfer-Encoding: chunked\r\n{extra}"
        f"Content-Type: multipart/form-data; boundary={boundary}\r\n\r\n"
    )
    body = f"{len(form):x}\r\n".encode() + form + b"\r\n0\r\n\r\n"
    behind = f"GET /api/v1/subjects HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}\r\n".encode()
    with socket.create_connection(("127.0.0.1", web.port), timeout=10) as sock:
        with contextlib.suppress(OSError):  # the server may answer and close unread
            sock.sendall(head.encode() + body + behind)
        received = b""
        with contextlib.suppress(ConnectionResetError):
            while chunk := sock.recv(65536):  # to the server's close: it must close
                received += chunk
    return received


@pytest.mark.parametrize("door", ["api", "studio"])
def test_a_request_framed_both_ways_is_refused_and_its_connection_closed(served, door):
    """Found by a review: Content-Length and Transfer-Encoding together were answered 201
    (a photo stored), and a request pipelined behind it answered too: a proxy in front that
    reads the length would have seen one request where Avatars answered two."""
    web, stack, _spool, token, subject_id = served
    if door == "api":
        path, headers = f"/api/v1/subjects/{subject_id}/references", {}
    else:
        path = f"/subjects/{subject_id}/"
        headers = {"Cookie": "; ".join(f"{k}={v}" for k, v in signed_in_cookies(web).items())}
    headers["Authorization"] = f"Bearer {token}"
    kept = stack.data_dir / "originals"
    before = sorted(p.name for p in kept.glob("*"))  # no folder yet: nothing

    received = both_framings_then_another(web, path, headers, png_bytes(43))

    answers = received.count(b"HTTP/1.1 ")
    assert received.startswith(b"HTTP/1.1 400 "), received[:300]
    assert answers == 1, f"{answers} answers on one connection: {received[:600]!r}"
    assert b"not both" in received and b"connection: close" in received.lower()
    assert sorted(p.name for p in kept.glob("*")) == before, "the photo was stored"


def spooled_while_open(pid: int, spool: Path) -> list[str]:
    """Return the files under `spool` the process holds open (deleted ones included)."""
    held = []
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = str(fd.readlink())
            if target.startswith(str(spool)):
                held.append(target)
    return held


def test_an_authenticated_body_past_2_5_mb_is_spooled_to_the_temporary_directory(served):
    """What docs/operations.md tells operators to make room for: Django's ASGI handler reads
    a body whole before any view, holding one past 2.5 MB in a deleted temporary file."""
    web, _stack, spool, token, subject_id = served
    body = b"\0" * (4 * MB)
    with socket.create_connection(("127.0.0.1", web.port), timeout=10) as sock:
        head = (
            f"POST /api/v1/subjects/{subject_id}/references HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {token}\r\nContent-Length: {len(body)}\r\n"
            "Content-Type: multipart/form-data; boundary=x\r\n\r\n"
        )
        sock.sendall(head.encode() + body[:-1])
        deadline = time.monotonic() + 5
        while not (held := spooled_while_open(web.proc.pid, spool)):
            assert time.monotonic() < deadline, "no body was spooled"
            time.sleep(0.05)
        sock.sendall(body[-1:])
        answer = sock.recv(65536).decode("latin-1")

    assert all(name.endswith("(deleted)") for name in held), held
    assert answer.split("\r\n", 1)[0].split()[1] == "400", answer[:300]  # not a form
    assert spooled_bytes(spool) == 0


def head_of(answer: str) -> tuple[str, dict[str, str]]:
    """The status code and the headers (lower-cased names) of a raw answer."""
    lines = answer.split("\r\n\r\n", 1)[0].split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return lines[0].split()[1], {name.lower(): value for name, value in headers.items()}


def test_every_refusal_over_uvicorn_is_marked_never_to_be_cached(served):
    """Found by a review: 401, 403 read_only, 411 and 413 answers had no Cache-Control, as
    docs/api.md says every answer has."""
    web, stack, _spool, token, subject_id = served
    read_only = {"Authorization": f"Bearer {stack.env['READ_ONLY_TOKEN']}"}
    writer = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    big = json.dumps({"name": "x" * (3 * MB)}).encode()
    answers = {
        "401": answer_to(web, "/api/v1/subjects", {"Content-Length": "2"}, b"{}"),
        "403": answer_to(web, "/api/v1/subjects", {**read_only, "Content-Length": "2"}, b"{}"),
        "411": chunked_upload(
            web,
            f"/api/v1/subjects/{subject_id}/references",
            {"Authorization": f"Bearer {token}"},
            "file",
            png_bytes(42),
        ),
        "413": answer_to(web, "/api/v1/subjects", {**writer, "Content-Length": str(len(big))}, big),
    }

    for expected, answer in answers.items():
        status, headers = head_of(answer)
        assert status == expected, answer[:300]
        assert "no-store" in headers.get("cache-control", ""), (expected, headers)


def test_a_query_of_too_many_fields_is_refused_on_every_route_over_uvicorn(served):
    """Found by a review: only `GET /subjects` counted its query's fields."""
    web, _stack, _spool, token, _subject_id = served
    query = "&".join(f"f{n}=1" for n in range(1001))
    headers = {"Authorization": f"Bearer {token}"}

    for method, path in (("GET", NO_TASK), ("GET", NO_BATCH), ("POST", "/api/v1/subjects")):
        answer = httpx.request(
            method, f"{web.url}{path}?{query}", headers=headers, json={"name": "Cy"}
        )

        assert answer.status_code == 400, (method, path, answer.text)
        assert answer.json()["error"] == {
            "code": "invalid_request",
            "message": "The query has more than 1000 fields; send fewer.",
        }
