"""What the originals scrub's tests share: running the command, stored originals, damage."""

import io
from pathlib import Path

import httpx
import respx
from django.core.management import call_command
from django.core.management.base import CommandError

from studio import originals
from studio.models import Asset, Origin
from tests.factories import png_bytes


def check(*args: str) -> tuple[int, str]:
    """Run check_originals; return its exit code and everything it printed."""
    out = io.StringIO()
    try:
        call_command("check_originals", *args, stdout=out, stderr=out)
    except CommandError as exc:
        return exc.returncode, f"{out.getvalue()}{exc}\n"
    return 0, out.getvalue()


def generated(seed: int, image_id: str = "") -> Asset:
    """A generated asset with its original stored, as the worker leaves it."""
    original = originals.save(png_bytes(seed))
    return Asset.objects.create_stored(
        original,
        file_name="candidate.png",
        origin=Origin.GENERATED,
        ember_image_id=image_id or f"img_{seed}",
    )


def uploaded(seed: int) -> Asset:
    original = originals.save(png_bytes(seed))
    return Asset.objects.create_stored(original, file_name="ada.png", origin=Origin.UPLOADED)


def file_of(asset: Asset) -> Path:
    return originals.path_for(asset.sha256, originals.extension_for(asset.mime))


def ember_sends(ember: respx.Router, data: bytes) -> respx.Route:
    """Have Ember's file route for image img_7 answer `data`."""
    answer = httpx.Response(200, content=data, headers={"Content-Type": "image/png"})
    return ember.get("/api/v1/images/img_7/file").mock(return_value=answer)


def flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def a_backup_holding(tmp_path: Path, *assets: Asset) -> Path:
    """A backup folder as `manage.py backup` leaves it, holding copies of these originals."""
    folder = tmp_path / "backup" / "originals"
    folder.mkdir(parents=True)
    for asset in assets:
        (folder / file_of(asset).name).write_bytes(file_of(asset).read_bytes())
    return tmp_path / "backup"
