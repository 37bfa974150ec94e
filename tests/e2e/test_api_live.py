"""The JSON API over a real uvicorn: a client that loses an answer and retries; its 500s."""

import json
import shutil
import socket

import httpx

from tests.factories import png_bytes
from tests.processes import Stack, Web, free_port, wait_for_http

API = "/api/v1"


def raw_post(path: str, body: bytes, headers: dict[str, str]) -> bytes:
    """Return the bytes of one HTTP/1.1 POST, as a client puts them on the wire."""
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", f"Content-Length: {len(body)}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def test_it_plans_one_batch_when_a_client_retries_with_its_key_after_losing_the_answer(
    stack: Stack,
):
    token = stack.manage("api_token", "retrier", "--create-user").strip().splitlines()[-1]
    port = free_port()
    web = stack.serve_web(port, log=stack.data_dir / "web.log")
    try:
        retry = lose_the_answer_then_retry(f"http://127.0.0.1:{port}", token)
    finally:
        web.terminate()
        web.wait(timeout=60)

    planned = stack.django(
        "from studio.models import Batch\n"
        "result = [[str(b.pk), b.tasks.count()] for b in Batch.objects.all()]"
    )
    assert retry.status_code == 202, retry.text
    assert planned == [[retry.json()["id"], 2]]
    assert retry.headers["Location"] == f"{API}/batches/{planned[0][0]}"


def lose_the_answer_then_retry(base: str, token: str) -> httpx.Response:
    """POST a batch whose answer the client never reads, then retry it under the same key."""
    wait_for_http(base)
    auth = {"Authorization": f"Bearer {token}"}
    subject = httpx.post(f"{base}{API}/subjects", json={"name": "Ada"}, headers=auth).json()
    httpx.post(
        f"{base}{API}/subjects/{subject['id']}/references",
        files={"file": ("ada.png", png_bytes(7), "image/png")},
        headers=auth,
    ).raise_for_status()
    body = json.dumps(
        {
            "prompt": "a friendly portrait",
            "subjects": [subject["id"]],
            "providers": [{"provider": "openai", "candidates": 2}],
        }
    ).encode()
    headers = {**auth, "Content-Type": "application/json", "Idempotency-Key": "nightly-7"}
    port = int(base.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=60) as lost:
        lost.sendall(raw_post(f"{API}/batches", body, headers))
        # The answer has arrived: the batch is planned. The client never reads it,
        # as when a connection drops or a read times out on the way back.
        assert lost.recv(1, socket.MSG_PEEK) == b"H"
    return httpx.post(f"{base}{API}/batches", content=body, headers=headers, timeout=60)


# As deployed: DEBUG off (a real secret then), plain HTTP on loopback.
DEPLOYED = {
    "DJANGO_DEBUG": "false",
    "DJANGO_SECRET_KEY": "a-test-secret-" * 5,
    "AVATARS_SSL_REDIRECT": "false",
}
SEED_ASSET = """
from studio import engine
from tests.factories import png_bytes
ada = engine.create_subject(name="Ada")
result = [ada.pk, engine.add_reference(subject=ada, data=png_bytes(8), file_name="a.png").pk]
"""


def test_it_answers_an_error_of_its_own_in_json_naming_nothing_inside(stack: Stack):
    """Found by a review: the API answered the studio's HTML page "Something went wrong here"."""
    token = stack.manage("api_token", "script", "--create-user").strip().splitlines()[-1]
    subject_id, asset_id = stack.django(SEED_ASSET)
    originals = stack.data_dir / "originals"
    shutil.rmtree(originals)
    originals.write_bytes(b"a file where the folder of originals should be")
    web = Web(stack, **DEPLOYED)
    try:
        with httpx.Client(base_url=web.url, headers={"Authorization": f"Bearer {token}"}) as api:
            answers = [
                api.get(f"{API}/assets/{asset_id}/original"),
                api.post(
                    f"{API}/subjects/{subject_id}/references",
                    files={"file": ("b.png", png_bytes(9), "image/png")},
                ),
            ]
    finally:
        web.stop()

    for answer in answers:
        assert answer.status_code == 500, answer.text[:300]
        assert answer.headers["content-type"] == "application/json"
        assert answer.json()["error"]["code"] == "internal_error"
        assert str(stack.data_dir) not in answer.text
    log = (stack.data_dir / "web.log").read_text()
    assert log.count("Traceback") >= 2, log[-2000:]


def test_it_answers_head_as_get_without_a_body_and_keeps_the_connection(stack: Stack):
    token = stack.manage("api_token", "script", "--create-user").strip().splitlines()[-1]
    web = Web(stack)
    try:
        with httpx.Client(base_url=web.url, headers={"Authorization": f"Bearer {token}"}) as api:
            head = api.head(f"{API}/subjects")
            got = api.get(f"{API}/subjects")  # the same connection: HEAD left it usable
    finally:
        web.stop()

    assert head.status_code == 200
    assert head.content == b""
    assert head.headers["content-length"] == str(len(got.content))
    assert got.json() == {"items": [], "next": None}
