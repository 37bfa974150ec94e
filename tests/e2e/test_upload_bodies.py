"""How many upload bodies one web process reads at once (avatars/upload_bodies.py), over a
real uvicorn.

Found by a review: thirty 21.7 MB uploads sent at once from one token left the web process
holding thirty temporary files, 651 MB that no listing shows; nothing bounded them but the
connection cap (about 26 GB). Here at most two are read at once; the others wait unread,
and one still waiting when the idle limit passes is answered 503 with `Retry-After`.
"""

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.wire import MB, limited
from tests.factories import png_bytes
from tests.processes import Template, Web

AT_ONCE = 2  # AVATARS_UPLOAD_BODIES_AT_ONCE for this module's server
IDLE = 3  # AVATARS_BODY_IDLE_SECONDS: how long an upload waits to be let in
BOUNDARY = "photo-boundary"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, template: Template):
    env = {
        "AVATARS_UPLOAD_BODIES_AT_ONCE": str(AT_ONCE),
        "AVATARS_UPLOAD_BODIES_A_PERSON": str(AT_ONCE),  # one person holds every place here
        "AVATARS_BODY_IDLE_SECONDS": str(IDLE),
    }
    with limited(tmp_path_factory.mktemp("bodies"), template, **env) as served:
        yield served


def form(photo: bytes) -> bytes:
    head = (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="a.png"\r\n'
        "Content-Type: image/png\r\n\r\n"
    )
    return head.encode() + photo + f"\r\n--{BOUNDARY}--\r\n".encode()


def upload_head(subject_id: int, token: str, length: int) -> bytes:
    return (
        f"POST /api/v1/subjects/{subject_id}/references HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: Bearer {token}\r\nContent-Length: {length}\r\n"
        f"Content-Type: multipart/form-data; boundary={BOUNDARY}\r\n\r\n"
    ).encode()


@contextlib.contextmanager
def held_open(web: Web, head: bytes, body: bytes, first: int = 4 * MB) -> Iterator[threading.Event]:
    """Send `head` and the `first` bytes of `body`, dripping two bytes a second of the rest
    but its last: an upload being read, holding its place. Setting the event yielded sends
    the rest. (Past 2.5 MB, Django's handler has rolled the body over into a temporary file.)
    """
    done = threading.Event()
    sock = socket.create_connection(("127.0.0.1", web.port), timeout=30)
    sock.sendall(head + body[:first])
    rest = body[first:]

    def drip() -> None:
        sent = 0
        while not done.wait(0.5) and sent < len(rest) - 1:
            sock.sendall(rest[sent : sent + 1])
            sent += 1
        with contextlib.suppress(OSError):
            sock.sendall(rest[sent:])
            sock.recv(65536)  # its answer

    dripping = threading.Thread(target=drip, daemon=True)
    dripping.start()
    try:
        yield done
    finally:
        done.set()
        dripping.join(timeout=30)
        sock.close()


def answer_of(sock: socket.socket) -> tuple[str, str]:
    """Read one answer to its close or its body's end; return its status line and body."""
    received = b""
    while b"\r\n\r\n" not in received or not received.rstrip().endswith(b"}"):
        chunk = sock.recv(65536)
        if not chunk:
            break
        received += chunk
    head, _, body = received.decode("latin-1").partition("\r\n\r\n")
    return head, body


def spooled(pid: int) -> int:
    """Count the temporary files the web process holds open (deleted ones included)."""
    count = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            count += "/spool/" in str(fd.readlink())
    return count


def test_an_upload_past_the_places_waits_unread_then_is_told_to_come_back(served):
    web, _stack, _spool, token, subject_id = served
    big = form(b"\0" * (6 * MB))
    with (
        held_open(web, upload_head(subject_id, token, len(big)), big),
        held_open(web, upload_head(subject_id, token, len(big)), big),
    ):
        time.sleep(0.5)
        third = socket.create_connection(("127.0.0.1", web.port), timeout=30)
        with third:
            sent = time.monotonic()
            with contextlib.suppress(OSError):  # the server may stop reading it
                third.settimeout(2)
                third.sendall(upload_head(subject_id, token, len(big)) + big)
            held = spooled(web.proc.pid)
            third.settimeout(30)
            head, body = answer_of(third)
            waited = time.monotonic() - sent

    assert held <= AT_ONCE, f"{held} bodies spooled at once (the bound is {AT_ONCE})"
    assert head.startswith("HTTP/1.1 503 "), head
    assert "retry-after: 5" in head.lower()
    assert json.loads(body)["error"]["code"] == "busy"
    assert IDLE - 0.5 < waited < IDLE + 5, f"answered after {waited:.1f} s (it waits {IDLE} s)"


def test_an_upload_waiting_for_a_place_is_read_once_one_frees(served):
    web, _stack, _spool, token, subject_id = served
    big = form(b"\0" * (6 * MB))
    photo = form(png_bytes(77))
    with (
        held_open(web, upload_head(subject_id, token, len(big)), big) as first,
        held_open(web, upload_head(subject_id, token, len(big)), big),
    ):
        time.sleep(0.5)
        with socket.create_connection(("127.0.0.1", web.port), timeout=30) as third:
            third.sendall(upload_head(subject_id, token, len(photo)) + photo)
            time.sleep(1)
            first.set()  # the first upload's last bytes: its place frees
            head, body = answer_of(third)

    assert head.startswith("HTTP/1.1 201 "), head + body


def a_photo_beside(served, head: bytes, body: bytes, seed: int) -> tuple[str, str, float]:
    """Send a photo with the token while two `head` + `body` requests trickle (as many as
    there are places); return its answer's status line and body, and the seconds it took."""
    web, _stack, _spool, token, subject_id = served
    photo = form(png_bytes(seed))
    with held_open(web, head, body, first=1024), held_open(web, head, body, first=1024):
        time.sleep(0.5)
        with socket.create_connection(("127.0.0.1", web.port), timeout=30) as mine:
            sent = time.monotonic()
            mine.sendall(upload_head(subject_id, token, len(photo)) + photo)
            answered, said = answer_of(mine)
            return answered, said, time.monotonic() - sent


def test_an_upload_from_someone_not_signed_in_takes_no_place(served):
    """Someone not signed in may send a studio page a few KB (a sign-in form) within
    seconds: that would be room enough to hold every place with a trickle, over and over,
    and keep a family's photos waiting. Such a body takes no place."""
    subject_id = served[4]
    small = form(b"\0" * (40 * 1024))
    stranger = (
        f"POST /subjects/{subject_id}/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Content-Length: {len(small)}\r\n"
        f"Content-Type: multipart/form-data; boundary={BOUNDARY}\r\n\r\n"
    ).encode()

    head, body, took = a_photo_beside(served, stranger, small, 78)

    assert head.startswith("HTTP/1.1 201 "), head + body
    assert took < IDLE, f"the photo waited {took:.1f} s behind strangers' bodies"


def test_a_body_sent_with_a_read_takes_no_place(served):
    """Found by a re-review: GETs with a read-only token and a multipart body, trickled,
    took every place, and a photo waited, then was told to come back, for as long as they
    went on (half an hour each, at the slowest rate allowed)."""
    stack = served[1]
    small = form(b"\0" * (64 * 1024))
    reading = (
        f"GET /api/v1/subjects HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: Bearer {stack.env['READ_ONLY_TOKEN']}\r\n"
        f"Content-Length: {len(small)}\r\n"
        f"Content-Type: multipart/form-data; boundary={BOUNDARY}\r\n\r\n"
    ).encode()

    head, body, took = a_photo_beside(served, reading, small, 79)

    assert head.startswith("HTTP/1.1 201 "), head + body
    assert took < IDLE, f"the photo waited {took:.1f} s behind bodies sent with a GET"


OTHER_PERSON = """
from django.contrib.auth.models import User
from studio.api.auth import issue_token
result = issue_token(user=User.objects.create_user("bo", password="y" * 12))
"""
SHARE = 2  # AVATARS_UPLOAD_BODIES_A_PERSON for the server below, of AT_ONCE + 1 places


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory, template: Template):
    env = {
        "AVATARS_UPLOAD_BODIES_AT_ONCE": str(AT_ONCE + 1),
        "AVATARS_UPLOAD_BODIES_A_PERSON": str(SHARE),
        "AVATARS_BODY_IDLE_SECONDS": str(IDLE),
    }
    with limited(tmp_path_factory.mktemp("shared"), template, **env) as served:
        yield served, served[1].django(OTHER_PERSON)


def test_one_person_holds_no_more_than_their_share_of_the_places(shared):
    """Found by a review: one member's uploads, trickled at the slowest rate allowed (43
    minutes each), held every place, and every other person's photo waited, then was told
    to come back. Their next upload now waits for one of their own places instead."""
    (web, _stack, _spool, token, subject_id), other = shared
    big = form(b"\0" * (6 * MB))
    photo = form(png_bytes(80))
    with (
        held_open(web, upload_head(subject_id, token, len(big)), big),
        held_open(web, upload_head(subject_id, token, len(big)), big),
    ):
        time.sleep(0.5)
        with socket.create_connection(("127.0.0.1", web.port), timeout=30) as third:
            sent = time.monotonic()  # its start alone: let in, it would hold a place too
            third.sendall(upload_head(subject_id, token, len(big)) + big[:1024])
            with socket.create_connection(("127.0.0.1", web.port), timeout=30) as theirs:
                started = time.monotonic()
                theirs.sendall(upload_head(subject_id, other, len(photo)) + photo)
                answered, said = answer_of(theirs)
                took = time.monotonic() - started
            held = spooled(web.proc.pid)
            head, body = answer_of(third)
            waited = time.monotonic() - sent

    assert answered.startswith("HTTP/1.1 201 "), answered + said
    assert took < IDLE - 1, f"another person's photo waited {took:.1f} s behind one person's"
    assert held <= SHARE, f"{held} bodies spooled for one person (their share is {SHARE})"
    assert head.startswith("HTTP/1.1 503 "), head
    assert json.loads(body)["error"]["code"] == "busy"
    assert IDLE - 0.5 < waited < IDLE + 5, f"answered after {waited:.1f} s (it waits {IDLE} s)"
