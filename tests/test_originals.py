"""The originals store (docs/design.md §7): decoded in full, named by hash, written once."""

import hashlib
import io
import os
import stat
import time
from pathlib import Path

import pytest
from PIL import Image

from studio import leftovers, originals
from studio.originals import ChecksumFailed, NotAnImage
from tests.factories import png_bytes


def listing(directory: Path) -> list[str]:
    """Every name in `directory`, hidden ones included (temporary files start with a dot)."""
    return sorted(os.listdir(directory)) if directory.exists() else []


def animated(fmt: str, frames: int = 3) -> bytes:
    images = [Image.new("RGB", (32, 24), (40 * i, 255 - 40 * i, 90)) for i in range(frames)]
    out = io.BytesIO()
    images[0].save(out, fmt, save_all=True, append_images=images[1:], duration=100, loop=0)
    return out.getvalue()


def noise_png(side: int) -> bytes:
    """A PNG of random pixels: it does not compress, so its size is about 3 bytes per pixel."""
    img = Image.frombytes("RGB", (side, side), os.urandom(side * side * 3))
    out = io.BytesIO()
    img.save(out, "PNG")
    return out.getvalue()


@pytest.fixture(scope="module")
def bomb_png() -> bytes:
    """A real, complete PNG of 20000 by 20000 pixels: tiny on disk, 400 megapixels decoded."""
    out = io.BytesIO()
    Image.new("1", (20_000, 20_000)).save(out, "PNG")
    return out.getvalue()


@pytest.fixture
def store_dir(data_dir: Path) -> Path:
    return data_dir / "originals"


class FsyncRecorder:
    """Stands in for os.fsync: records what each call flushed and can fail on a chosen call."""

    def __init__(self, fail_on: int | None = None) -> None:
        self.calls: list[str] = []
        self.fail_on = fail_on
        self._real = os.fsync

    def __call__(self, fd: int) -> None:
        mode = os.fstat(fd).st_mode
        self.calls.append("directory" if stat.S_ISDIR(mode) else "file")
        if self.fail_on == len(self.calls):
            raise OSError(5, "Input/output error")
        self._real(fd)


# --- what is stored, and where ------------------------------------------------


@pytest.mark.parametrize(
    ("fmt", "mime", "extension"),
    [
        ("PNG", "image/png", ".png"),
        ("JPEG", "image/jpeg", ".jpg"),
        ("WEBP", "image/webp", ".webp"),
        ("GIF", "image/gif", ".gif"),
    ],
)
def test_it_stores_an_image_under_its_sha256_with_exactly_its_bytes(
    store_dir, fmt, mime, extension
):
    data = png_bytes(seed=3, fmt=fmt)
    digest = hashlib.sha256(data).hexdigest()

    original = originals.save(data)

    assert original.sha256 == digest
    assert original.path == store_dir / f"{digest}{extension}"
    assert original.path.read_bytes() == data
    assert original.size == len(data)
    assert (original.info.mime, original.info.extension) == (mime, extension)
    assert (original.info.width, original.info.height) == (64, 48)
    assert listing(store_dir) == [f"{digest}{extension}"]


@pytest.mark.parametrize(
    ("fmt", "mime", "extension"),
    [("WEBP", "image/webp", ".webp"), ("GIF", "image/gif", ".gif")],
)
def test_it_stores_an_animated_clip_with_all_its_frames(store_dir, fmt, mime, extension):
    data = animated(fmt, frames=3)
    digest = hashlib.sha256(data).hexdigest()

    original = originals.save(data)

    assert original.path == store_dir / f"{digest}{extension}"
    assert original.path.read_bytes() == data
    assert original.info.mime == mime
    assert original.info.frames == 3


def test_it_reads_back_a_stored_original_checked_against_its_hash(store_dir):
    data = png_bytes(seed=4)
    original = originals.save(data)

    assert originals.read(original.sha256, "image/png") == data


def test_it_writes_the_same_bytes_only_once(store_dir, monkeypatch):
    data = png_bytes(seed=5)
    first = originals.save(data)
    before = first.path.stat()
    fsync = FsyncRecorder()
    monkeypatch.setattr(os, "fsync", fsync)

    second = originals.save(data)

    after = second.path.stat()
    assert second.sha256 == first.sha256
    assert second.path == first.path
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert listing(store_dir) == [first.path.name]
    # No second copy was written (the file's inode and time above); the one in place is
    # flushed, then its name: it may have been put there by hand, not yet on the disk.
    assert fsync.calls == ["file", "directory"], fsync.calls


def test_it_refuses_to_reuse_a_stored_original_whose_bytes_were_corrupted(store_dir):
    data = png_bytes(seed=6)
    original = originals.save(data)
    original.path.write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))

    with pytest.raises(ChecksumFailed) as saving:
        originals.save(data)
    with pytest.raises(ChecksumFailed) as reading:
        originals.read(original.sha256, "image/png")

    assert str(saving.value) == "Stored original failed its checksum."
    assert str(reading.value) == "Stored original failed its checksum."
    assert listing(store_dir) == [original.path.name]


# --- what is refused ----------------------------------------------------------


HTML = b"<!doctype html><html><body><img src=x onerror=alert(1)></body></html>"
SVG = (
    b'<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg" width="64" height="48">'
    b'<script>alert(1)</script><rect width="64" height="48"/></svg>'
)


def bmp_bytes() -> bytes:
    return png_bytes(seed=7, fmt="BMP")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        pytest.param(b"", "The file is empty.", id="empty"),
        pytest.param(
            b"just some text, not a picture",
            "The file is not a PNG, JPEG, WebP or GIF image.",
            id="text",
        ),
        pytest.param(HTML, "The file is not a PNG, JPEG, WebP or GIF image.", id="html"),
        pytest.param(SVG, "The file is not a PNG, JPEG, WebP or GIF image.", id="svg"),
        pytest.param(
            bmp_bytes(), "The file is not a PNG, JPEG, WebP or GIF image.", id="bmp-not-allowed"
        ),
    ],
)
def test_it_refuses_bytes_that_are_not_an_accepted_image_and_writes_nothing(
    store_dir, data, message
):
    with pytest.raises(NotAnImage) as refused:
        originals.save(data)

    assert str(refused.value) == message
    assert listing(store_dir) == []


def test_it_refuses_a_truncated_png_that_opens_fine_and_writes_nothing(store_dir, caplog):
    whole = noise_png(128)
    cut = whole[: len(whole) // 2]
    with Image.open(io.BytesIO(cut)) as img:  # the header alone looks like a good PNG
        assert (img.format, img.size) == ("PNG", (128, 128))

    with pytest.raises(NotAnImage) as refused:
        originals.save(cut)

    assert str(refused.value) == originals.DAMAGED  # for people
    assert "truncated" in caplog.text, "the decoder's words, for whoever reads the log"
    assert listing(store_dir) == []


def test_it_refuses_an_animated_gif_cut_in_half_and_writes_nothing(store_dir):
    clip = animated("GIF", frames=3)

    with pytest.raises(NotAnImage) as refused:
        originals.save(clip[: len(clip) // 2])

    assert str(refused.value).startswith("The image could not be decoded")
    assert listing(store_dir) == []


@pytest.mark.parametrize(
    "make",
    [
        lambda: animated("GIF"),
        lambda: animated("WEBP"),
        lambda: png_bytes(seed=15),
        lambda: png_bytes(seed=15, fmt="JPEG"),
        lambda: png_bytes(seed=15, fmt="WEBP"),
    ],
    ids=["animated-gif", "animated-webp", "png", "jpeg", "webp"],
)
def test_it_answers_a_file_cut_short_anywhere_with_not_an_image_never_a_crash(store_dir, make):
    data = make()
    crashes = {}
    for length in range(1, len(data)):
        try:
            originals.save(data[:length])
        except NotAnImage:
            pass
        except Exception as exc:
            crashes[length] = f"{type(exc).__name__}: {exc}"

    assert crashes == {}
    assert not [name for name in listing(store_dir) if name.endswith(".tmp")]


def test_it_refuses_html_dressed_in_a_png_signature(store_dir):
    with pytest.raises(NotAnImage) as refused:
        originals.save(b"\x89PNG\r\n\x1a\n" + HTML)

    assert str(refused.value).startswith("The image could not be decoded")
    assert listing(store_dir) == []


def test_it_refuses_a_decompression_bomb_and_writes_nothing(store_dir, bomb_png):
    assert len(bomb_png) < 100_000

    with pytest.raises(NotAnImage) as refused:
        originals.save(bomb_png)

    assert str(refused.value) == "The image has too many pixels; at most 40,000,000 are accepted."
    assert listing(store_dir) == []


def test_it_refuses_an_image_over_the_pixel_limit_and_writes_nothing(store_dir, settings):
    settings.AVATARS_MAX_IMAGE_PIXELS = 64 * 48 - 1

    with pytest.raises(NotAnImage) as refused:
        originals.save(png_bytes(seed=8, size=(64, 48)))

    assert str(refused.value) == (
        "The image has too many pixels (64 x 48); at most 3,071 are accepted."
    )
    assert listing(store_dir) == []


def test_it_refuses_a_file_over_the_byte_limit_and_writes_nothing(store_dir, settings):
    settings.AVATARS_MAX_IMAGE_BYTES = 1024 * 1024
    data = noise_png(700)
    assert len(data) > 1024 * 1024

    with pytest.raises(NotAnImage) as refused:
        originals.save(data)

    assert str(refused.value) == "The file is too large (the limit is 1 MB)."
    assert listing(store_dir) == []


def test_it_leaves_earlier_originals_alone_when_it_refuses_a_file(store_dir):
    kept = originals.save(png_bytes(seed=9))

    with pytest.raises(NotAnImage):
        originals.save(HTML)

    assert listing(store_dir) == [kept.path.name]


# --- durability ---------------------------------------------------------------


def test_it_fsyncs_the_file_and_then_the_directory(store_dir, monkeypatch):
    fsync = FsyncRecorder()
    monkeypatch.setattr(os, "fsync", fsync)

    originals.save(png_bytes(seed=10))

    assert len(fsync.calls) >= 2
    assert fsync.calls.index("file") < fsync.calls.index("directory")


def test_it_propagates_a_failed_file_fsync_and_leaves_no_file_behind(store_dir, monkeypatch):
    monkeypatch.setattr(os, "fsync", FsyncRecorder(fail_on=1))

    with pytest.raises(OSError, match="Input/output error"):
        originals.save(png_bytes(seed=11))

    assert listing(store_dir) == []  # neither the original nor its temporary file


def test_it_propagates_a_failed_directory_fsync_and_leaves_no_temp_file(store_dir, monkeypatch):
    fsync = FsyncRecorder(fail_on=2)
    monkeypatch.setattr(os, "fsync", fsync)

    with pytest.raises(OSError, match="Input/output error"):
        originals.save(png_bytes(seed=12))

    assert fsync.calls == ["file", "directory"]
    assert not [name for name in listing(store_dir) if name.endswith(".tmp")]


def test_it_does_not_acknowledge_a_retry_after_the_directory_fsync_failed(store_dir, monkeypatch):
    data = png_bytes(seed=13)
    monkeypatch.setattr(os, "fsync", FsyncRecorder(fail_on=2))
    with pytest.raises(OSError):
        originals.save(data)

    # The disk never confirmed the rename. Saving again must not report the
    # original as durable until a directory fsync has succeeded.
    fsync = FsyncRecorder()
    monkeypatch.setattr(os, "fsync", fsync)
    original = originals.save(data)

    assert original.path.read_bytes() == data
    assert "directory" in fsync.calls


@pytest.mark.parametrize(("fail_on", "which"), [(1, "file"), (2, "directory")])
def test_it_calls_a_failed_fsync_not_durable_and_leaves_nothing_under_the_name(
    store_dir, monkeypatch, fail_on, which
):
    fsync = FsyncRecorder(fail_on=fail_on)
    monkeypatch.setattr(os, "fsync", fsync)

    with pytest.raises(originals.NotDurable, match="Input/output error"):
        originals.save(png_bytes(seed=17))

    assert fsync.calls[-1] == which
    # Not even the renamed file: its name was never confirmed, so nothing may find it.
    assert listing(store_dir) == []


def test_it_keeps_an_original_that_was_durable_before_when_a_later_fsync_fails(
    store_dir, monkeypatch
):
    data = png_bytes(seed=18)
    original = originals.save(data)
    monkeypatch.setattr(os, "fsync", FsyncRecorder(fail_on=1))

    with pytest.raises(originals.NotDurable):
        originals.save(data)

    assert listing(store_dir) == [original.path.name]
    assert original.path.read_bytes() == data


# --- housekeeping and names ---------------------------------------------------


def age(path: Path, minutes: float) -> None:
    """Set a file's modification time `minutes` into the past."""
    then = time.time() - minutes * 60
    os.utime(path, (then, then))


def test_it_removes_stale_temporary_files_and_nothing_else(store_dir):
    original = originals.save(png_bytes(seed=14))
    dead = [f".{original.sha256}.a1b2c3d4e5f6.tmp", ".0123abcd.ffffff.tmp"]
    keepers = ["notes.tmp", ".keep", "draft.tmp.png"]
    for name in dead + keepers:
        (store_dir / name).write_bytes(b"x")
        age(store_dir / name, minutes=60)

    removed = leftovers.remove_stale_temp_files()

    assert removed == 2
    assert listing(store_dir) == sorted([original.path.name, *keepers])


@pytest.mark.parametrize("folder", ["originals", "thumbs"])
def test_it_sweeps_only_temporary_files_old_enough_to_be_abandoned(data_dir, folder):
    directory = data_dir / folder
    directory.mkdir()
    # A write in progress (an upload the web process is saving right now) ...
    fresh = directory / f".{'a' * 64}.png.0a0b0c0d0e0f.tmp"
    fresh.write_bytes(b"half an upload")
    # ... and one a process died in the middle of, a quarter of an hour ago.
    stale = directory / f".{'b' * 64}-256.webp.0f0e0d0c0b0a.tmp"
    stale.write_bytes(b"abandoned")
    age(stale, minutes=15)

    removed = leftovers.remove_stale_temp_files()

    assert removed == 1
    assert listing(directory) == [fresh.name]


def test_it_removes_nothing_when_there_is_no_originals_directory_yet(store_dir):
    assert leftovers.remove_stale_temp_files() == 0
    assert not store_dir.exists()


@pytest.mark.parametrize(
    "name",
    [
        "../x",
        "../" + "a" * 61,
        "a" * 63,
        "a" * 65,
        "g" * 64,
        "A" * 64,
        "a" * 62 + "/x",
        "",
    ],
)
def test_it_refuses_a_name_that_is_not_a_sha256_hex_digest(name):
    with pytest.raises(ValueError, match="not a sha256 hex digest"):
        originals.path_for(name, ".png")


@pytest.mark.parametrize("extension", [".exe", "/../../x.png", "", ".PNG"])
def test_it_refuses_an_extension_that_is_not_an_originals(extension):
    with pytest.raises(ValueError, match="not an original's extension"):
        originals.path_for("a" * 64, extension)


def test_it_places_a_valid_name_inside_the_originals_directory(store_dir):
    assert originals.path_for("0f" * 32, ".webp") == store_dir / f"{'0f' * 32}.webp"


def test_it_puts_back_only_the_original_a_name_promises_over_a_corrupt_file(store_dir):
    original = originals.save(png_bytes(1))
    original.path.write_bytes(b"rotten")

    with pytest.raises(ChecksumFailed):
        originals.put_back(png_bytes(2), sha256=original.sha256, mime="image/png")
    with pytest.raises(NotAnImage):
        originals.put_back(png_bytes(1), sha256=original.sha256, mime="image/jpeg")
    assert original.path.read_bytes() == b"rotten"

    assert originals.put_back(png_bytes(1), sha256=original.sha256, mime="image/png") == (
        original.path
    )
    assert original.path.read_bytes() == png_bytes(1)
    assert listing(store_dir) == [original.path.name]


def test_it_writes_its_own_file_over_a_link_to_the_same_bytes(store_dir, tmp_path):
    # A link in the archive holds no bytes: the day what it points to goes, the original
    # goes with it. A save of those bytes makes the archive hold them itself.
    data = png_bytes(7)
    elsewhere = tmp_path / "elsewhere.png"
    elsewhere.write_bytes(data)
    target = originals.path_for(originals.sha256_of(data), ".png")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.symlink_to(elsewhere)

    stored = originals.save(data)

    assert stored.path == target
    assert not target.is_symlink(), "the archive still holds only a link to the bytes"
    elsewhere.unlink()
    assert target.read_bytes() == data


def test_it_reads_no_original_through_a_link(store_dir, tmp_path):
    # The archive does not hold what a link points to: a check that passed it let Ember
    # release its copy (a review).
    data = png_bytes(8)
    stored = originals.save(data)
    elsewhere = tmp_path / "elsewhere.png"
    elsewhere.write_bytes(data)
    stored.path.unlink()
    stored.path.symlink_to(elsewhere)

    with pytest.raises(ChecksumFailed):
        originals.read(stored.sha256, "image/png")
    assert originals.holds(stored.sha256, "image/png") is False
