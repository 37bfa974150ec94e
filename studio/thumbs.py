"""Thumbnails: small still images derived from originals, cached on disk, rebuilt when missing.

A thumbnail is named by its original's SHA-256, its size and the version of how it is
drawn (`thumbs/<sha256>-<size>-v<RENDERING>.webp`), so it never goes stale: the same name
always means the same picture, and pages may cache it for good under a URL that carries
the same three. The cache is only a cache: deleting any file in it costs one rebuild from
the original, never data.
"""

import contextlib
import io
import logging
import stat
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

from django.conf import settings
from PIL import Image, ImageOps

from studio import chunks, originals

log = logging.getLogger(__name__)


class NotCached(Exception):
    """A thumbnail drawn but not kept: the disk refused it. `data` is the thumbnail."""

    def __init__(self, data: bytes) -> None:
        super().__init__("The thumbnail could not be kept.")
        self.data = data


SIZES = (128, 256, 512)  # pixels on the longer side; the only sizes pages ask for
MIME = "image/webp"
EXTENSION = ".webp"
QUALITY = 82
HEX = frozenset("0123456789abcdef")
ORIENTATION = 0x0112  # the EXIF tag that says how to turn the pixels to show them
QUARTER_TURNS = frozenset({5, 6, 7, 8})  # its values that show the height as the width
# How thumbnails are drawn: raised whenever `render` draws the same original differently,
# so that neither this cache nor a browser's (a year, immutable) keeps the old picture.
# 2: turned as their EXIF Orientation says (1 left phone portraits sideways).
# 3: a colour profile is kept only when it is an RGB one of at most PROFILE_BYTES (2 kept
# any: a 64-pixel WebP with a 24 MB profile had three 25 MB thumbnails).
RENDERING = 3
PROFILE_BYTES = 64 * 1024  # common RGB profiles take 0.5 to 4 KB; a camera's up to some 60
RGB_PROFILE = b"RGB "  # an ICC profile's colour space, bytes 16 to 20 of its header


# The thumbnails being drawn in this process: each one's lock, and how many hold or wait.
_DRAWING: dict[Path, tuple[threading.Lock, int]] = {}
_DRAWING_GUARD = threading.Lock()


def thumbs_dir() -> Path:
    return Path(settings.AVATARS_DATA_DIR) / "thumbs"


def path_for(sha256: str, size: int) -> Path:
    """Return where the thumbnail of this original at this size is cached."""
    if size not in SIZES:
        raise ValueError(f"not a thumbnail size: {size!r}")
    return thumbs_dir() / f"{_checked(sha256)}-{size}-v{RENDERING}{EXTENSION}"


def forget(sha256: str) -> None:
    """Delete every cached thumbnail of an original: each size, each rendering."""
    for path in thumbs_dir().glob(f"{_checked(sha256)}-*{EXTENSION}"):
        path.unlink(missing_ok=True)


def _checked(sha256: str) -> str:
    if len(sha256) != 64 or not set(sha256) <= HEX:
        raise ValueError("not a sha256 hex digest")
    return sha256


def thumbnail(*, sha256: str, mime: str, size: int) -> Path:
    """Return the cached thumbnail of an original, deriving it first when it is missing.

    Only a missing thumbnail reads the original (raising what `originals.read`
    raises: FileNotFoundError, ChecksumFailed). An animated original gives its
    first frame.
    """
    target = path_for(sha256, size)
    if whole(target):
        return target
    with _drawing(target):
        if whole(target):  # drawn by a request this one waited for
            return target
        data = render(originals.read(sha256, mime), size)
        # Fsynced before the rename, so a power loss cannot leave a truncated thumbnail
        # under its final name; the directory is not fsynced, since losing the name only
        # costs a rebuild. Two processes building one thumbnail both win with equal bytes.
        try:
            originals.write_atomically(target, data)
        except OSError as exc:
            # A full or read-only disk: a cache, so shown all the same (every new
            # thumbnail answered 500 on a full disk: a review).
            log.warning("thumbnail %s not kept: %s", target.name, exc.strerror or exc)
            raise NotCached(data) from exc
        _drop_older_renderings(sha256, size, target)
    return target


@contextlib.contextmanager
def _drawing(target: Path) -> Iterator[None]:
    """Hold the right to draw `target` in this process: requests for one missing thumbnail
    at once draw it once, the others wait and take it (8 at once each decoded a heavy
    original, 9.3 s of CPU: a review)."""
    with _DRAWING_GUARD:
        lock, waiting = _DRAWING.get(target, (threading.Lock(), 0))
        _DRAWING[target] = (lock, waiting + 1)
    try:
        with lock:
            yield
    finally:
        with _DRAWING_GUARD:
            lock, waiting = _DRAWING[target]
            if waiting == 1:
                del _DRAWING[target]
            else:
                _DRAWING[target] = (lock, waiting - 1)


def _drop_older_renderings(sha256: str, size: int, current: Path) -> None:
    """Delete this original's thumbnails at `size` drawn by an earlier rendering.

    Nothing asks for them again (their URLs lead to the current one), so each would stay
    on disk until its original was removed.
    """
    for path in thumbs_dir().glob(f"{sha256}-{size}*{EXTENSION}"):
        if path != current:
            path.unlink(missing_ok=True)


def whole(path: Path) -> bool:
    """Say whether `path` is a regular file that is a whole WebP, by its header alone.

    A RIFF file says its own length: a thumbnail damaged in place (garbage written over
    it, a truncation) fails this and is built again instead of being served, and cached
    by browsers for a year under its immutable name. Twelve bytes read, nothing decoded.
    """
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            return False
        with path.open("rb") as file:
            head = file.read(12)
    except OSError:
        return False
    return (
        len(head) == 12
        and head[:4] == b"RIFF"
        and head[8:] == b"WEBP"
        and int.from_bytes(head[4:8], "little") + 8 == info.st_size
    )


def render(data: bytes, size: int) -> bytes:
    """Encode a still WebP of the image's first frame, fitted inside `size` x `size`.

    A JPEG is decoded at the smallest of 1/8, 1/4, 1/2 or full scale that still covers
    the size (libjpeg scales as it decodes): a 40-megapixel photo then takes a few MB,
    not a few hundred. Other formats are decoded whole, one at a time per `decoding()`.
    """
    with originals.decoding(), Image.open(io.BytesIO(data)) as img:
        img.draft(None, (size, size))  # only a JPEG takes it; other formats ignore it
        has_alpha = img.mode in ("RGBA", "LA", "PA") or "transparency" in img.info
        target = "RGBA" if has_alpha else "RGB"
        img.load()  # the first frame, right after open()
        # convert() copies (the current frame only); an image already in the mode is kept.
        still = img if img.mode == target else img.convert(target)
        # A phone stores a portrait as landscape pixels and an EXIF Orientation: turned
        # as the tag says, or every portrait photo was shown sideways (a review).
        orientation = img.getexif().get(ORIENTATION, 1)
        if orientation != 1:
            still.getexif()[ORIENTATION] = orientation
            still = ImageOps.exif_transpose(still)
        still.thumbnail((size, size), Image.Resampling.LANCZOS)
        # A thumbnail carries no metadata of its original (EXIF, XMP), only its colour profile.
        icc = _profile(img.info.get("icc_profile"))
        still.info.clear()
        out = io.BytesIO()
        still.save(out, "WEBP", quality=QUALITY, method=4, **({"icc_profile": icc} if icc else {}))
    return out.getvalue()


def _profile(icc: object) -> bytes | None:
    """Return the colour profile a thumbnail keeps: an RGB one (its pixels are RGB) of at
    most PROFILE_BYTES. Any other is left out (the colours are then read as sRGB): a profile
    of another colour space would misdraw them, and a thumbnail is small whatever its
    original carries."""
    if not isinstance(icc, bytes) or len(icc) > PROFILE_BYTES or icc[16:20] != RGB_PROFILE:
        return None
    return icc


def turned(sha256: str, mime: str) -> bool:
    """Say whether an original is shown turned a quarter (its EXIF Orientation), so that its
    width and height swap; False when that cannot be read. Its pixels are never decoded.

    Pillow's own `getexif()` of a PNG decodes the whole image when the PNG has no eXIf
    chunk before its image data (most have none), to look for one after it: a 116 KB PNG
    of 6320 x 6320 then cost a page view 0.35 s and 150 MB (a review). The chunks' heads
    are walked instead, and the EXIF read as any other format's.
    """
    try:
        with originals.path_of(sha256, mime).open("rb") as file, Image.open(file) as img:
            if img.format == "PNG" and "exif" not in img.info:
                found = chunks.png_exif(file)
                if found is not None:
                    img.info["exif"] = found
            # Image's getexif, not the PNG plugin's: it reads what open() found, no pixels.
            return Image.Image.getexif(img).get(ORIENTATION, 1) in QUARTER_TURNS
    except (OSError, ValueError, SyntaxError, struct.error):
        return False
