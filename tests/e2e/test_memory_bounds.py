"""What uploads and thumbnails cost the web process in memory, over a real uvicorn.

Found by a review: sixteen 25 MB uploads at once grew the web process by 1.36 GB (each
held its file a few times over, all at once), and thumbnails of 40-megapixel images drawn
two at a time peaked far above two decodes and kept hundreds of MB afterwards (glibc kept
the freed pixels in its heaps). Uploads now take turns (`AVATARS_UPLOADS_AT_ONCE`) and
decoded pixels go back to the system when freed (studio/heap.py).
"""

import io
import os
import struct
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from PIL import Image

from studio import heap
from tests.e2e.wire import MB, limited, signed_in_cookies, status_kib
from tests.processes import Stack, Template, Web

UPLOADS_AT_ONCE = 2  # AVATARS_UPLOADS_AT_ONCE for this module's servers (the default)
DECODES_AT_ONCE = 2  # AVATARS_DECODES_AT_ONCE (the default)


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, template: Template
) -> Iterator[tuple[Web, Stack, Path, str, int]]:
    with limited(tmp_path_factory.mktemp("memory"), template) as served:
        yield served


def padded_png(seed: int, padding: int) -> bytes:
    """An 8 x 8 PNG carrying `padding` bytes of a private chunk: a large file, a tiny decode."""
    out = io.BytesIO()
    Image.new("RGB", (8, 8), (seed % 256, 90, 160)).save(out, "PNG")
    png = out.getvalue()
    body = os.urandom(padding)
    chunk = struct.pack(">I", len(body)) + b"prIv" + body
    chunk += struct.pack(">I", zlib.crc32(b"prIv" + body))
    return png[:33] + chunk + png[33:]  # after the signature and IHDR


def at_once(calls: list) -> list:
    results: list = [None] * len(calls)

    def run(index: int) -> None:
        results[index] = calls[index]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_uploads_sent_at_once_take_turns_and_the_memory_they_hold_is_bounded(served):
    _web, stack, _spool, token, subject_id = served
    files = [padded_png(n, 20 * MB) for n in range(8)]
    web = Web(stack, AVATARS_UPLOADS_AT_ONCE=str(UPLOADS_AT_ONCE))  # its peak is these uploads'
    try:
        with httpx.Client(
            base_url=web.url, headers={"Authorization": f"Bearer {token}"}, timeout=300
        ) as api:
            assert api.get("/api/v1/subjects").status_code == 200  # the app loaded
            idle = status_kib(web.proc.pid, "VmRSS")
            answers = at_once(
                [
                    lambda data=data, n=n: api.post(
                        f"/api/v1/subjects/{subject_id}/references",
                        files={"file": (f"padded-{n}.png", data, "image/png")},
                    )
                    for n, data in enumerate(files)
                ]
            )
            peak = status_kib(web.proc.pid, "VmHWM")
    finally:
        web.stop()

    assert [a.status_code for a in answers] == [201] * len(files), [a.text[:200] for a in answers]
    held = 4 * len(files[0]) // 1024  # what one upload may hold at once, in KiB
    bound = UPLOADS_AT_ONCE * held + 64 * 1024
    assert peak - idle <= bound, (
        f"{len(files)} uploads of {len(files[0]) / MB:.0f} MiB at once took the web process from "
        f"{idle / 1024:.0f} to {peak / 1024:.0f} MiB (bound: {bound / 1024:.0f} MiB more: "
        f"{UPLOADS_AT_ONCE} at a time, four copies of the file each, and 64 MiB)"
    )


def test_thumbnails_of_large_images_drawn_at_once_give_their_memory_back(served):
    _web, stack, _spool, token, subject_id = served
    side = (6000, 6000)  # 36 megapixels: a decode of 103 MiB as RGB
    photos = []
    for n in range(3):
        out = io.BytesIO()
        Image.new("RGB", side, (40 * n, 120, 200)).save(out, "PNG")
        photos.append(out.getvalue())
    web = Web(stack)
    try:
        auth = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=web.url, headers=auth, timeout=300) as api:
            ids = [
                api.post(
                    f"/api/v1/subjects/{subject_id}/references",
                    files={"file": (f"large-{n}.png", photo, "image/png")},
                ).json()["id"]
                for n, photo in enumerate(photos)
            ]
        cookies = signed_in_cookies(web)
        before = status_kib(web.proc.pid, "VmRSS")
        with httpx.Client(base_url=web.url, cookies=cookies, timeout=300) as pages:
            answers = at_once(
                [
                    lambda asset=asset, size=size: pages.get(f"/assets/{asset}/thumb/{size}/v3/")
                    for asset in ids
                    for size in (128, 256, 512)
                ]
            )
        peak, after = status_kib(web.proc.pid, "VmHWM"), status_kib(web.proc.pid, "VmRSS")
    finally:
        web.stop()

    assert [a.status_code for a in answers] == [200] * 9, [a.status_code for a in answers]
    decoded = side[0] * side[1] * 3 // 1024  # KiB
    bound = DECODES_AT_ONCE * 2 * decoded + 64 * 1024
    assert peak - before <= bound, (
        f"9 thumbnails of 36-megapixel images at once took the web process from "
        f"{before / 1024:.0f} to {peak / 1024:.0f} MiB (bound: {bound / 1024:.0f} MiB more: "
        f"{DECODES_AT_ONCE} decodes at once, two copies of the pixels each, and 64 MiB)"
    )
    kept = heap.PILLOW_BLOCKS * Image.core.get_block_size() // 1024  # KiB Pillow may keep
    assert after - before <= kept + 64 * 1024, (
        f"after drawing them the web process still held {(after - before) / 1024:.0f} MiB more "
        f"than before ({before / 1024:.0f} -> {after / 1024:.0f} MiB; bound: "
        f"{kept / 1024:.0f} MiB of blocks Pillow keeps to reuse, and 64 MiB)"
    )
