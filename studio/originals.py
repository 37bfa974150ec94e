"""The originals store (docs/design.md §7): written once, named by SHA-256, durable first.

An original is proved to be an image by decoding it in full (not `verify()`,
which passes truncated files), hashed, written to a temporary file opened for
exclusive creation, flushed and fsynced, renamed into place atomically, and the
directory is fsynced so the rename itself survives power loss. Any OSError
propagates; a failed fsync raises NotDurable and leaves nothing under the final
name that this call put there: nothing may be acknowledged after it.
"""

import contextlib
import errno
import hashlib
import io
import logging
import os
import stat
import threading
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from PIL import Image, ImageSequence, UnidentifiedImageError

from studio import chunks, flocks, jpeg
from studio.durable import NotDurable as NotDurable  # where callers look
from studio.durable import fsync, fsync_dir, fsync_file

logger = logging.getLogger(__name__)

# Pillow format -> (mime, extension). Anything else is refused.
FORMATS = {
    "PNG": ("image/png", ".png"),
    "JPEG": ("image/jpeg", ".jpg"),
    "WEBP": ("image/webp", ".webp"),
    "GIF": ("image/gif", ".gif"),
}
# A phone's multi-picture JPEG (MPO: the photo, then a preview or a depth map) is a JPEG
# that every reader shows as its first picture: stored and served as the JPEG it is. Only
# that picture is decoded; the others are kept as they came, like any bytes after a
# JPEG's end (and a hostile one could be slow to decode, unlike the picture shown).
ALIASES = {"MPO": "JPEG"}
EXTENSIONS = {ext for _mime, ext in FORMATS.values()}
TEMP_SUFFIX = ".tmp"
# What a disk that will not take a file says: full, over its quota, read-only.
DISK_REFUSED = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS})
NAMING_LOCK = "originals.lock"  # in the data dir, beside originals/ (`naming`)
MAX_SIDE = 16_384  # pixels; a 1 x 100000 strip is within the pixel cap but no photo
CHECKSUM_FAILED = "Stored original failed its checksum."
DAMAGED = "The image could not be decoded: the file is damaged or incomplete."
METADATA_BOMB = (
    "The image carries a colour profile or text that is far too large once unpacked "
    "(over a megabyte); save it again without its profile."
)
_DECODES = threading.BoundedSemaphore(settings.AVATARS_DECODES_AT_ONCE)


class NotAnImage(ValueError):
    """The bytes are not an image we accept: the message says why, for people."""


class NotAnOriginal(Exception):
    """A file where an original should be that cannot be one; the message says why."""


class ChecksumFailed(Exception):
    """A stored original no longer hashes to its name."""

    def __init__(self) -> None:
        super().__init__(CHECKSUM_FAILED)


@dataclass(frozen=True)
class ImageInfo:
    mime: str
    extension: str
    width: int
    height: int
    frames: int


@dataclass(frozen=True)
class Original:
    sha256: str
    path: Path
    info: ImageInfo
    size: int


def originals_dir() -> Path:
    return Path(settings.AVATARS_DATA_DIR) / "originals"


def path_for(sha256: str, extension: str) -> Path:
    """Return where the original with this hash lives; refuse anything but a hex digest."""
    if len(sha256) != 64 or any(c not in "0123456789abcdef" for c in sha256):
        raise ValueError("not a sha256 hex digest")
    if extension not in EXTENSIONS:
        raise ValueError(f"not an original's extension: {extension!r}")
    return originals_dir() / f"{sha256}{extension}"


def path_of(sha256: str, mime: str) -> Path:
    """Return where the original with this hash and type lives (ValueError if neither fits)."""
    return path_for(sha256, extension_for(mime))


def extension_for(mime: str) -> str:
    for known_mime, ext in FORMATS.values():
        if known_mime == mime:
            return ext
    raise ValueError(f"not an original's mime type: {mime!r}")


def precheck(data: bytes) -> bytes:
    """Refuse, before anything walks or decodes them, bytes no image store would take.

    Empty, over the byte cap, a JPEG header built to be slow to read (`studio.jpeg`), or
    a PNG, WebP or GIF of more parts than any encoder writes (`studio.chunks`):
    cheap checks, run first by `inspect` and by whatever reads an upload before it.
    Return `data` for chaining.
    """
    if not data:
        raise NotAnImage("The file is empty.")
    if len(data) > settings.AVATARS_MAX_IMAGE_BYTES:
        raise NotAnImage(too_large())
    if jpeg.is_jpeg(data):
        try:
            # Before Pillow reads it, a byte at a time, and the location stripping walks it.
            jpeg.check_later(data, jpeg.check_header(data))
            jpeg.check_metadata(data)  # before the location stripping looks at each
        except jpeg.BadJpeg as exc:
            raise NotAnImage(str(exc)) from None
    try:
        chunks.check(data)  # before anything walks a PNG's, WebP's or GIF's parts
    except chunks.TooManyChunks as exc:
        raise NotAnImage(str(exc)) from None
    return data


def inspect(data: bytes, *, checked: bool = False) -> ImageInfo:
    """Decode every frame of `data` and describe it, or raise NotAnImage saying why;
    `checked`: `precheck` already passed these very bytes (an upload's first look)."""
    if not checked:
        precheck(data)
    try:
        with warnings.catch_warnings(), decoding():
            # A decompression bomb is an error here, not a warning to log and go on.
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data), formats=list(FORMATS)) as img:
                fmt = ALIASES.get(img.format or "", img.format or "")
                width, height = img.size
                _check_size(width, height)
                if fmt == "JPEG":
                    jpeg.check_scans(jpeg.scans(data), width, height)
                # Counting frames only parses their headers; every frame is decoded onto
                # the whole canvas, so a tiny file with many frames on a large canvas
                # would cost minutes and gigabytes: refuse it before decoding any.
                declared = getattr(img, "n_frames", 1)
                if fmt == "WEBP":
                    _check_webp(width, height)
                _check_frames(declared, width, height, animated=fmt != "JPEG")
                frames = 0
                pictures = [img] if fmt == "JPEG" else ImageSequence.Iterator(img)
                for frame in pictures:
                    frames += 1
                    # A GIF's frame larger than its screen grows Pillow's canvas to it as it
                    # is reached (before its decode): the size read at open says nothing of it.
                    width, height = max(width, frame.width), max(height, frame.height)
                    _check_size(width, height)
                    # A declared count may lie.
                    _check_frames(frames, width, height, animated=fmt != "JPEG")
                    frame.load()
    except NotAnImage:
        raise
    except jpeg.BadJpeg as exc:
        raise NotAnImage(str(exc)) from None
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise NotAnImage(
            f"The image has too many pixels; at most {settings.AVATARS_MAX_IMAGE_PIXELS:,} "
            "are accepted."
        ) from None
    except UnidentifiedImageError:
        raise NotAnImage("The file is not a PNG, JPEG, WebP or GIF image.") from None
    except Exception as exc:  # Pillow raises many types on broken files
        raise _broken(exc) from None
    mime, extension = FORMATS[fmt]
    return ImageInfo(mime=mime, extension=extension, width=width, height=height, frames=frames)


def _broken(exc: Exception) -> NotAnImage:
    """Say, for people, why the decoder refused an image; its own words go to the log (a
    review in the studio read "image file is truncated (24 bytes not processed)")."""
    if "MAX_TEXT_CHUNK" in str(exc):  # Pillow's own name for its cap, said for people
        return NotAnImage(METADATA_BOMB)
    logger.info("An image was refused as damaged; the decoder said: %r", exc)
    return NotAnImage(DAMAGED)


def _check_frames(frames: int, width: int, height: int, *, animated: bool) -> None:
    """Refuse an animation with too many frames, too large a canvas or too many pixels.

    Each frame of an animation is composed onto a canvas of the whole size, and Pillow
    holds several canvases at once while it does; a multi-picture JPEG (`animated` False)
    composes nothing, and only its first picture is decoded.
    """
    if frames > 1 and animated and width * height > settings.AVATARS_MAX_ANIMATION_PIXELS:
        raise NotAnImage(
            f"The animation is {width} x {height} pixels; an animation may have at most "
            f"{settings.AVATARS_MAX_ANIMATION_PIXELS:,} pixels a frame."
        )
    if frames > settings.AVATARS_MAX_FRAMES:
        raise NotAnImage(
            f"The image has {frames} frames; at most {settings.AVATARS_MAX_FRAMES} are accepted."
        )
    if frames * width * height > settings.AVATARS_MAX_TOTAL_PIXELS:
        raise NotAnImage(
            f"The animation has too many pixels across its frames ({frames} frames of "
            f"{width} x {height}; at most {settings.AVATARS_MAX_TOTAL_PIXELS:,} in all)."
        )


def _check_size(width: int, height: int) -> None:
    """Refuse a still past the pixel cap, or with a side longer than any accepted."""
    if width * height > settings.AVATARS_MAX_IMAGE_PIXELS:
        raise NotAnImage(
            f"The image has too many pixels ({width} x {height}); at most "
            f"{settings.AVATARS_MAX_IMAGE_PIXELS:,} are accepted."
        )
    if max(width, height) > MAX_SIDE:
        raise NotAnImage(
            f"The image is {width} x {height} pixels; no side may be longer than {MAX_SIDE}."
        )


def _check_webp(width: int, height: int) -> None:
    """Refuse a WebP, still or not, whose canvas is over the animation cap.

    Pillow decodes every WebP through libwebp's animation decoder, which composes even
    a still onto canvases of the whole size: a 1.6 KB still of 40 megapixels cost the
    web process over 600 MB. JPEG and PNG keep the still's cap.
    """
    if width * height > settings.AVATARS_MAX_ANIMATION_PIXELS:
        raise NotAnImage(
            f"The WebP image is {width} x {height} pixels; a WebP image may have at most "
            f"{settings.AVATARS_MAX_ANIMATION_PIXELS:,} pixels. Send a larger photo as a "
            "JPEG or PNG."
        )


@contextlib.contextmanager
def decoding() -> Iterator[None]:
    """Hold one of the process's few places to decode an image in full (wait for one).

    A full decode takes up to a few hundred MB for the largest image the caps let in;
    without a bound, a handful of uploads (or thumbnails) at once would take gigabytes.
    """
    with _DECODES:
        yield


def too_large() -> str:
    """Say, for people, that a file passed the size cap (also used before the file is read)."""
    limit = settings.AVATARS_MAX_IMAGE_BYTES / (1024 * 1024)
    return f"The file is too large (the limit is {limit:g} MB)."


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def save(data: bytes, *, checked: bool = False) -> Original:
    """Store `data` as an original (once) and return where it lives (`checked` as `inspect`).

    Raises NotAnImage for bytes that are not an accepted image, ChecksumFailed
    when a file already stored under this hash does not match it, NotDurable when
    an fsync fails, and OSError when the disk refuses the write.

    The bytes are written and fsynced under a temporary name first; naming them
    happens under `naming()`, one save at a time across processes. Two saves of the
    same bytes (a provider's placeholder for two candidates, an upload equal to a
    result) would otherwise race: one acknowledging the file the other has just
    named and is about to take away because the disk did not confirm its name.
    """
    info = inspect(data, checked=checked)
    digest = sha256_of(data)
    target = path_for(digest, info.extension)
    # Most saves are of new bytes: written before the lock is taken, so it is held briefly.
    # A link there holds no bytes of the archive's own: the rename below replaces it.
    temp = None if target.exists() and not target.is_symlink() else write_temp(target, data)
    try:
        with naming():
            if target.exists() and not target.is_symlink():  # stored, or named by another save
                return _acknowledge(target, digest, info, len(data))
            if temp is None:  # there a moment ago, and taken back since
                temp = write_temp(target, data)
            os.replace(temp, target)
            try:
                fsync_dir(target.parent)  # the rename itself must survive power loss
            except NotDurable:
                # This call put the file there and the disk never confirmed its name:
                # take it away (no other save can have acknowledged it: they wait for
                # the lock), so a retry writes it afresh instead of trusting it.
                target.unlink(missing_ok=True)
                raise
    finally:
        if temp is not None:
            temp.unlink(missing_ok=True)
    return Original(sha256=digest, path=target, info=info, size=len(data))


def _acknowledge(target: Path, digest: str, info: ImageInfo, size: int) -> Original:
    """Return the original already stored under `target` if it holds these bytes."""
    # Not a regular file (a pipe, a device put there by hand) is never opened: it could hang.
    if not target.is_file() or file_sha256(target) != digest:
        raise ChecksumFailed()
    # Bytes and name durable before acknowledged again (a failure leaves the file): one a
    # person put there may not be on the disk yet, and Ember may be told to let go (a review).
    fsync_file(target)
    fsync_dir(target.parent)
    return Original(sha256=digest, path=target, info=info, size=size)


@contextlib.contextmanager
def naming(*, shared: bool = False, wait: bool = True) -> Iterator[bool]:
    """Hold the originals' naming lock (an flock, so across threads and processes).

    Saves and removals hold it alone; `shared` looks (`holds`) hold it together.
    Yields False, holding nothing, when `wait` is off and someone else holds it.
    """
    directory = originals_dir()
    directory.mkdir(parents=True, exist_ok=True)
    # Beside the folder, not in it: everything in originals/ is an original or a temp.
    with flocks.held(directory.parent / NAMING_LOCK, shared=shared, wait=wait) as taken:
        yield taken


def holds(sha256: str, mime: str, *, wait: bool = True) -> bool | None:
    """Say whether the original named is in the archive, looked at under the naming lock.

    A removal checks that no row claims a file and unlinks it under the same lock, so a
    True here stays true for a row committed before this call. None when `wait` is off
    and the lock is taken (look again from a thread that may wait).
    """
    try:
        path = path_of(sha256, mime)
    except ValueError:  # a hash or type that names no original: nothing is held
        return False
    with naming(shared=True, wait=wait) as held:
        return path.is_file() and not path.is_symlink() if held else None  # a link: not held


def keep(data: bytes, original: Original) -> bool:
    """Write an acknowledged original again if a removal took it before its row was
    committed; True when it had to. Call once the row claiming it is committed.

    `save` may acknowledge a file already stored (the same bytes uploaded before, or
    generated), whose last row a removal deletes before this caller's row is written:
    the removal finds no row and unlinks. Looked at under the naming lock, after the
    commit, the file is either still there for good or put back here.
    """
    with naming():
        if original.path.is_file():
            return False
        write_atomically(original.path, data)
        fsync_dir(original.path.parent)
    return True


def put_back(data: bytes, *, sha256: str, mime: str) -> Path:
    """Write a missing or corrupt original again, only if `data` is the original named.

    Unlike `save`, a file already under the name is replaced (in one rename): the
    caller found it corrupt. Raises ChecksumFailed when `data` does not hash to
    `sha256`, NotAnImage when it is not an accepted image of type `mime`, NotDurable
    or OSError when the disk does not take it.
    """
    if sha256_of(data) != sha256:
        raise ChecksumFailed()
    info = inspect(data)
    if info.mime != mime:
        raise NotAnImage(f"The bytes are {info.mime}, not {mime}.")
    target = path_for(sha256, info.extension)
    write_atomically(target, data)
    fsync_dir(target.parent)
    return target


def write_atomically(target: Path, data: bytes) -> None:
    """Write `data` under `target` so readers see nothing or the whole, fsynced file.

    The bytes go to a temporary file (`write_temp`) and are renamed into place.
    (Making the rename durable is the caller's choice: `fsync_dir`.)
    """
    temp = write_temp(target, data)
    try:
        os.replace(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def write_temp(target: Path, data: bytes) -> Path:
    """Write `data` to a new temporary file beside `target`, flushed and fsynced; return it.

    Opened for exclusive creation under a random name; a write that fails leaves nothing.
    """
    directory = target.parent
    directory.mkdir(parents=True, exist_ok=True)
    temp = directory / f".{target.name}.{os.urandom(6).hex()}{TEMP_SUFFIX}"
    try:
        # Inside: a stop (Ctrl-C, a SIGTERM's handler) is raised as the open returns, and
        # the file it made must go too (its random name is no other write's).
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            fsync(fh.fileno(), f"the file {target.name}")
    except BaseException as exc:
        temp.unlink(missing_ok=True)
        if type(exc) is OSError and exc.filename is None:  # a write's says no file (a review)
            raise OSError(exc.errno, exc.strerror, str(target)) from exc
        raise
    return temp


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1024 * 1024), b""):
            digest.update(chunk)
    return digest.hexdigest()


def read(sha256: str, mime: str) -> bytes:
    """Return a stored original's bytes, checked against their hash.

    FileNotFoundError when it is not there; ChecksumFailed when what is there is not its
    bytes: a folder, a device or a symbolic link (not held: the archive lacks what it points
    to) in its place, or a file past the cap (looked at first: neither hangs nor fills memory).
    """
    try:
        data = read_regular(path_of(sha256, mime), links=False)
    except NotAnOriginal:
        raise ChecksumFailed() from None
    if sha256_of(data) != sha256:
        raise ChecksumFailed()
    return data


def said_first(said: object) -> list[tuple[str, str]]:
    """Return each image type (mime, extension), the type `said` first."""
    return sorted(FORMATS.values(), key=lambda known: known[0] != said)


def held_for(sha256: object, said: object = None) -> tuple[bytes, str] | None:
    """Return the bytes the archive holds whole under `sha256`, and their type, if any.

    Each type is looked under, the type `said` (Ember's word for an image) first: the
    archive names a file by what its bytes are, which that word may not match.
    """
    if not isinstance(sha256, str):
        return None
    for mime, _extension in said_first(said):
        try:
            return read(sha256, mime), mime
        except (OSError, ValueError, ChecksumFailed):
            continue
    return None


def check_regular(path: Path, *, links: bool = True) -> None:
    """Raise NotAnOriginal unless `path` is a regular file within the image cap (not opened);
    a symbolic link to one passes only with `links`."""
    info = path.stat() if links else path.lstat()
    limit = settings.AVATARS_MAX_IMAGE_BYTES
    if not stat.S_ISREG(info.st_mode):
        raise NotAnOriginal("not a regular file")
    if info.st_size > limit:
        raise NotAnOriginal(f"{info.st_size} bytes, over the {limit}-byte cap for an image")


def read_regular(path: Path, *, links: bool = True) -> bytes:
    """Return the bytes of the regular file at `path`, if it is no larger than the image cap.

    Looked at before it is opened: a folder, a device or a pipe (even behind a symlink)
    raises NotAnOriginal without being read, as does a file past the cap.
    FileNotFoundError when nothing is there.
    """
    check_regular(path, links=links)
    limit = settings.AVATARS_MAX_IMAGE_BYTES
    with path.open("rb") as file:
        data = file.read(limit + 1)
    if len(data) > limit:
        raise NotAnOriginal(f"over the {limit}-byte cap for an image")
    return data
