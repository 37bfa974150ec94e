"""Bodies are capped before anything reads them, over a real uvicorn (the README's way)."""

import contextlib
import io
import random
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from PIL import Image

from tests.e2e.wire import (
    MB,
    limited,
    post_form_page,
    post_raw,
    signed_in_cookies,
    spooled_bytes,
    status_kib,
)
from tests.processes import Stack, Template, Web

HUGE = 300 * MB
ANONYMOUS_SECONDS = 2  # AVATARS_ANONYMOUS_BODY_SECONDS for this module's server
IDLE_SECONDS = 2  # AVATARS_BODY_IDLE_SECONDS for this module's server
SLOWEST = 1000  # AVATARS_BODY_MIN_BYTES_PER_SECOND for this module's server


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, template: Template
) -> Iterator[tuple[Web, Stack, Path, str, int]]:
    # One install for the module: `stack` is per test, and every test here reads one server.
    # Short waits for a body, so the tests that trickle one wait seconds, not minutes.
    with limited(
        tmp_path_factory.mktemp("limits"),
        template,
        AVATARS_ANONYMOUS_BODY_SECONDS=str(ANONYMOUS_SECONDS),
        AVATARS_BODY_IDLE_SECONDS=str(IDLE_SECONDS),
        AVATARS_BODY_MIN_BYTES_PER_SECOND=str(SLOWEST),
    ) as served:
        yield served


def test_a_300_mb_post_without_a_token_is_answered_at_once_and_spools_nothing(served):
    web, _stack, spool, _token, subject_id = served

    status, seconds = post_raw(
        web,
        f"/api/v1/subjects/{subject_id}/references",
        {"Content-Length": str(HUGE), "Content-Type": "multipart/form-data; boundary=x"},
        send_first=64 * 1024,
    )

    assert status.split()[1] == "401", status  # a missing token first, whatever the body
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


@pytest.mark.parametrize(
    ("path", "code"),
    [("/api/v1/subjects", "413"), ("/api/v1/subjects/{subject}/references", "400")],
    ids=["a JSON body: 413", "a photo's upload: 400 too_large, as the API docs say"],
)
def test_a_length_over_the_limit_is_refused_unread_even_with_a_token(served, path, code):
    web, _stack, _spool, token, subject_id = served

    status, seconds = post_raw(
        web,
        path.format(subject=subject_id),
        {"Content-Length": str(HUGE), "Authorization": f"Bearer {token}"},
        send_first=0,
    )

    assert status.split()[1] == code, status
    assert seconds < 1.0, f"{code} after {seconds:.2f} s (bound: 1 s)"


def test_a_streamed_body_is_cut_off_once_it_passes_the_limit(served):
    web, _stack, spool, token, _subject_id = served
    limit = 2.5 * MB  # a JSON body's (DATA_UPLOAD_MAX_MEMORY_SIZE)
    sent = 0
    with socket.create_connection(("127.0.0.1", web.port), timeout=10) as sock:
        sock.sendall(
            (
                "POST /api/v1/subjects HTTP/1.1\r\nHost: x\r\n"
                f"Authorization: Bearer {token}\r\nTransfer-Encoding: chunked\r\n"
                "Content-Type: application/json\r\n\r\n"
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


@pytest.mark.parametrize(
    ("method", "path", "code"),
    [
        ("DELETE", "/api/v1/subjects", "405"),
        ("PUT", "/api/v1/batches", "405"),
        ("POST", "/api/v1/no-such-route", "404"),
    ],
)
def test_a_token_that_may_write_gets_its_404_or_405_before_the_body_is_read(
    served, method, path, code
):
    """Found by a review: a 20 MB body sent with the wrong method was read in full first;
    docs/api.md: "still answers 405 first, whether or not the request carries a body
    (which is not read)"."""
    web, _stack, spool, token, _subject_id = served

    status, seconds = post_raw(
        web,
        path,
        {"Content-Length": str(20 * MB), "Authorization": f"Bearer {token}"},
        send_first=64 * 1024,
        method=method,
    )

    assert status.split()[1] == code, status
    assert seconds < 1.0, f"{code} after {seconds:.2f} s (bound: 1 s)"
    assert spooled_bytes(spool) < 2 * MB, f"{spooled_bytes(spool)} bytes spooled (bound: 2 MB)"


def test_a_read_only_token_reads_with_head_as_a_token_that_may_write_does(served):
    """Found by a review: a HEAD carrying a body was answered 405 to a read-only token and
    200 to one that may write; docs/api.md: HEAD is taken wherever GET is."""
    web, stack, _spool, token, _subject_id = served
    answers = {}
    for scope, bearer in (("read-write", token), ("read-only", stack.env["READ_ONLY_TOKEN"])):
        answers[scope] = httpx.request(
            "HEAD",
            f"{web.url}/api/v1/subjects",
            content=b"{}",
            headers={"Authorization": f"Bearer {bearer}", "Content-Type": "application/json"},
        ).status_code

    assert answers == {"read-write": 200, "read-only": 200}, answers


def trickle(web: Web, path: str, headers: dict[str, str], first: bytes) -> tuple[str, float]:
    """Send headers and `first`, then a byte every 0.5 s until answered; return the status line
    and the seconds from the headers' sending to the answer."""
    with socket.create_connection(("127.0.0.1", web.port), timeout=30) as sock:
        head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        started = time.perf_counter()
        sock.sendall(head.encode() + first)
        sock.settimeout(0.5)
        answer = b""
        while not answer and time.perf_counter() - started < 20:
            try:
                answer = sock.recv(65536)
            except TimeoutError:
                with contextlib.suppress(OSError):
                    sock.sendall(b"a")
        return answer.decode("latin-1").split("\r\n", 1)[0], time.perf_counter() - started


@pytest.mark.parametrize("path", ["/accounts/login/", "/subjects/1/", "/no/such/page/"])
def test_a_large_studio_body_from_someone_not_signed_in_is_refused_unread(served, path):
    """Found by a review: 10 such posts of 20 MB held 200 MB of spooled files before a 403."""
    web, _stack, spool, _token, _subject_id = served

    status, seconds = post_raw(
        web,
        path,
        {"Content-Length": str(20 * MB), "Content-Type": "application/x-www-form-urlencoded"},
        send_first=64 * 1024,  # far less than it announced: nobody waits for the rest
    )

    assert status.split()[1] == "413", status
    assert seconds < 1.0, f"413 after {seconds:.2f} s (bound: 1 s)"
    assert spooled_bytes(spool) < 2 * MB, f"{spooled_bytes(spool)} bytes spooled (bound: 2 MB)"


def test_a_photo_sent_after_the_sign_in_ended_gets_a_page_that_leads_back(served):
    """Found by a review: a photo larger than a stranger may send got a line of plain text."""
    web, _stack, spool, _token, subject_id = served
    headers = {
        "Cookie": "sessionid=ended-long-ago",
        "Referer": f"{web.url}/subjects/{subject_id}/",
        "Content-Length": str(300 * 1024),
        "Content-Type": "multipart/form-data; boundary=x",
    }

    status, rest, answer = post_form_page(web, f"/subjects/{subject_id}/", headers)

    assert status.split()[1] == "413", answer[:300]
    assert "content-type: text/html; charset=utf-8" in rest.lower()
    assert "You were signed out, so what you sent was not done" in answer
    assert f'href="/accounts/login/?next=%2Fsubjects%2F{subject_id}%2F"' in answer
    assert spooled_bytes(spool) < 2 * MB


def test_a_body_trickled_by_someone_not_signed_in_is_cut_off_at_its_deadline(served):
    """200 connections trickling a byte every 2 s were all still open and unanswered after 20 s."""
    web, *_rest = served

    status, seconds = trickle(
        web,
        "/accounts/login/",
        {"Content-Length": "2000", "Content-Type": "application/x-www-form-urlencoded"},
        b"username=ada&",
    )

    assert status.split()[1] == "408", status
    bound = ANONYMOUS_SECONDS + 1.5
    assert seconds < bound, f"408 after {seconds:.1f} s (bound: {bound} s)"


def test_a_tokens_body_trickled_a_byte_at_a_time_is_cut_off_at_its_deadline(served):
    """Found by a review: only the idle limit bounded a token's body, so a byte a minute
    held the connection for as long as its sender liked. Its deadline: the idle limit plus
    its length at the slowest rate, 2 s + 2000 bytes ÷ 1000 bytes/s here."""
    web, _stack, _spool, token, _subject_id = served

    status, seconds = trickle(
        web,
        "/api/v1/subjects",
        {
            "Authorization": f"Bearer {token}",
            "Content-Length": "2000",
            "Content-Type": "application/json",
        },
        b'{"name": "',
    )

    assert status.split()[1] == "408", status
    deadline = IDLE_SECONDS + 2000 / SLOWEST
    assert deadline - 0.5 < seconds < deadline + 1.5, f"408 after {seconds:.1f} s ({deadline} s)"


def test_a_signed_in_body_that_stops_arriving_is_answered_408(served):
    web, *_rest = served
    cookies = signed_in_cookies(web)
    cookie = "; ".join(f"{k}={v}" for k, v in cookies.items())
    headers = {
        "Cookie": cookie,
        "Content-Length": str(2 * MB),
        "Content-Type": "multipart/form-data; boundary=x",
    }

    with socket.create_connection(("127.0.0.1", web.port), timeout=30) as sock:
        head = "POST /subjects/1/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        started = time.perf_counter()
        sock.sendall(head.encode() + b"\0" * (256 * 1024))  # more than a stranger may send
        received = sock.recv(65536)
        seconds = time.perf_counter() - started
        while chunk := sock.recv(65536):  # the body may follow in a packet of its own
            received += chunk
        answer = received.decode("latin-1")

    assert answer.split("\r\n", 1)[0].split()[1] == "408", answer[:300]
    assert "did not arrive in time" in answer
    assert IDLE_SECONDS - 0.5 < seconds < IDLE_SECONDS + 1.5, f"408 after {seconds:.1f} s"


def test_a_signed_in_person_uploads_a_photo_larger_than_a_stranger_may_send(served):
    web, stack, _spool, _token, subject_id = served
    cookies = signed_in_cookies(web)
    out = io.BytesIO()
    Image.frombytes("RGB", (300, 300), random.Random(9).randbytes(300 * 300 * 3)).save(out, "PNG")
    photo = out.getvalue()
    assert len(photo) > 64 * 1024, len(photo)  # more than someone not signed in may send

    with httpx.Client(base_url=web.url, cookies=cookies) as browser:
        page = browser.get(f"/subjects/{subject_id}/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
        assert token, page.text[:500]
        answer = browser.post(
            f"/subjects/{subject_id}/",
            data={"csrfmiddlewaretoken": token[1]},
            files={"photo": ("big.png", photo, "image/png")},
        )

    assert answer.status_code == 302, answer.text[:500]
    stored = stack.django(
        "from studio.models import Asset\n"
        "result = list(Asset.objects.filter(file_name='big.png').values_list('size', flat=True))"
    )
    assert stored, "the photo was not stored"


def test_a_signed_in_upload_past_the_limit_gets_a_page_of_the_studio_leading_back(served):
    """Found by a review: the studio gave way to a bare text page about the request body."""
    web, _stack, spool, _token, subject_id = served
    cookie = "; ".join(f"{k}={v}" for k, v in signed_in_cookies(web).items())
    headers = {
        "Cookie": cookie,
        "Referer": f"{web.url}/subjects/{subject_id}/",
        "Content-Length": str(27 * MB),
        "Content-Type": "multipart/form-data; boundary=x",
    }

    status, rest, answer = post_form_page(web, f"/subjects/{subject_id}/", headers)

    assert status.split()[1] == "413", answer[:300]
    assert "content-type: text/html; charset=utf-8" in rest.lower()
    assert "That photo is too large: the limit is 25 MB." in answer
    assert f'<a class="button" href="/subjects/{subject_id}/">Go back</a>' in answer
    assert spooled_bytes(spool) < 2 * MB


def test_a_12_megapixel_photo_costs_the_web_process_its_decode_and_a_few_copies(served):
    _web, stack, _spool, token, subject_id = served
    size = (4000, 3000)
    noise = Image.effect_noise(size, 40).convert("RGB")
    out = io.BytesIO()
    Image.blend(noise, Image.linear_gradient("L").resize(size).convert("RGB"), 0.5).save(
        out, "JPEG", quality=90
    )
    photo = out.getvalue()
    headers = {"Authorization": f"Bearer {token}"}
    web = Web(stack)  # a process of its own: its peak is this upload's
    try:
        with httpx.Client(base_url=web.url, headers=headers, timeout=120) as api:
            assert api.get("/api/v1/subjects").status_code == 200  # the app loaded
            idle = status_kib(web.proc.pid, "VmRSS")
            answer = api.post(
                f"/api/v1/subjects/{subject_id}/references",
                files={"file": ("big.jpg", photo, "image/jpeg")},
            )
            peak = status_kib(web.proc.pid, "VmHWM")
    finally:
        web.stop()

    assert answer.status_code == 201, answer.text[:500]
    decoded = size[0] * size[1] * 3 // 1024
    bound = decoded + 5 * len(photo) // 1024 + 40 * 1024
    assert peak - idle <= bound, (
        f"the upload of a {len(photo) / MB:.1f} MiB photo took the web process from "
        f"{idle / 1024:.0f} to {peak / 1024:.0f} MiB (bound: {bound / 1024:.0f} MiB more: "
        f"its decode {decoded / 1024:.0f} MiB, five copies of the file and 40 MiB)"
    )
