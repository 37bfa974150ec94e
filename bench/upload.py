"""Goal: a reference upload costs little more than the work it cannot avoid.

A 24-megapixel JPEG goes through the API over uvicorn (`POST
/api/v1/subjects/{id}/references`: the body door, multipart parsing, location
stripping, decode with caps, hash, write once with fsync, the row). The floor is
what any store must do with the same bytes in one process: Pillow's decode,
SHA-256, write and fsync. Rounds alternate between the two; each upload is a
new photo (its JFIF density names its round), so none is answered as a repeat.
"""

import hashlib
import io
import os
import time
from pathlib import Path
from typing import Any

import httpx
from django.contrib.auth.models import User
from PIL import Image

from bench import data
from bench.common import Child, Context, Result, WebProcess, paired_ratio
from studio import engine
from studio.api.auth import issue_token

TARGET = 1.5
SIZE = (6000, 4000)  # 24 megapixels
API = "/api/v1"


def run(ctx: Context) -> Result:
    rounds = ctx.size(9, 3)
    photo = _photo()
    data_dir = ctx.tmp / "upload"
    ctx.log(f"upload: {len(photo) / 1e6:.1f} MB JPEG of {SIZE[0]}x{SIZE[1]}, {rounds} rounds")
    child = Child(ctx, "upload", __name__, data_dir=data_dir)
    try:
        setup = child.call("setup")
        api_times: list[float] = []
        floor_times: list[float] = []
        with WebProcess(ctx, data_dir, name="upload-web") as web, httpx.Client() as client:
            for index in range(rounds):
                body = _variant(photo, index)
                floor_times.append(child.call("floor", path=str(_stage(ctx, body))))
                api_times.append(_upload(client, web.url, setup, body, index))
    finally:
        child.close()
    ratio = paired_ratio(api_times, floor_times)
    return Result(
        goal="reference upload vs decode+hash+fsync",
        measured=ratio,
        unit="x",
        target=f"≤ {TARGET}x",
        passed=ratio <= TARGET,
        raw=(
            f"API over uvicorn median {sorted(api_times)[len(api_times) // 2]:.2f} s vs "
            f"in-process floor {sorted(floor_times)[len(floor_times) // 2]:.2f} s "
            f"({len(photo) / 1e6:.1f} MB, {SIZE[0] * SIZE[1] / 1e6:.0f} MP, {rounds} rounds)"
        ),
    )


def _photo() -> bytes:
    """Return a 24-megapixel JPEG with detail (a gradient with noise, not a flat colour)."""
    noise = Image.effect_noise(SIZE, 40).convert("RGB")
    gradient = Image.linear_gradient("L").resize(SIZE).convert("RGB")
    out = io.BytesIO()
    Image.blend(noise, gradient, 0.5).save(out, "JPEG", quality=90)
    return out.getvalue()


def _variant(photo: bytes, index: int) -> bytes:
    """Return the photo with a JFIF density naming the round: new bytes, same pixels.

    A density is kept by the upload as it is. An EXIF description was, until the location
    stripping came to keep nothing of EXIF but the orientation; a comment, before that,
    was taken out too: either left every round's photo the same bytes, answered as a repeat.
    """
    assert photo.startswith(b"\xff\xd8\xff\xe0") and photo[6:11] == b"JFIF\x00", photo[:16]
    dots = 72 + index  # per inch, across and down
    return photo[:13] + bytes([1]) + dots.to_bytes(2, "big") * 2 + photo[18:]


def _stage(ctx: Context, body: bytes) -> Path:
    path = ctx.tmp / "upload-floor-input.jpg"
    path.write_bytes(body)
    return path


def _upload(client: httpx.Client, url: str, setup: dict[str, Any], body: bytes, n: int) -> float:
    headers = {"Authorization": f"Bearer {setup['token']}"}
    started = time.perf_counter()
    answer = client.post(
        f"{url}{API}/subjects/{setup['subject']}/references",
        files={"file": (f"big-{n}.jpg", body, "image/jpeg")},
        headers=headers,
        timeout=120,
    )
    seconds = time.perf_counter() - started
    if answer.status_code != 201:
        raise RuntimeError(f"the upload answered {answer.status_code}: {answer.text[:300]}")
    return seconds


# --- in the child -------------------------------------------------------------


def op_setup() -> dict[str, Any]:
    data.migrate()
    user = User.objects.create_user(username="uploader")
    subject = engine.create_subject(name="Ada")
    return {"token": issue_token(user=user, read_only=False), "subject": subject.pk}


def op_floor(path: str) -> float:
    """Time what any store does with the bytes: decode, SHA-256, write and fsync."""
    from django.conf import settings

    body = Path(path).read_bytes()
    started = time.perf_counter()
    with Image.open(io.BytesIO(body)) as image:
        image.load()
    digest = hashlib.sha256(body).hexdigest()
    target = Path(settings.AVATARS_DATA_DIR) / f"floor-{digest}.jpg"
    with target.open("wb") as out:
        out.write(body)
        out.flush()
        os.fsync(out.fileno())
    seconds = time.perf_counter() - started
    target.unlink()
    return seconds
