"""Thumbnails (docs/design.md §7): derived, cached by hash and size, rebuilt when missing."""

import io
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from PIL import Image, ImageFile

from studio import originals, thumbs
from tests.factories import png_bytes
from tests.processes import run_snippet


def stored(data: bytes) -> originals.Original:
    return originals.save(data)


def animated(fmt: str, size: tuple[int, int] = (120, 90)) -> bytes:
    """Return a three-frame animation whose first frame is red, then green, then blue."""
    frames = [Image.new("RGB", size, colour) for colour in ((255, 0, 0), (0, 255, 0), (0, 0, 255))]
    out = io.BytesIO()
    frames[0].save(out, fmt, save_all=True, append_images=frames[1:], duration=100, loop=0)
    return out.getvalue()


def thumb_of(original: originals.Original, size: int) -> Path:
    return thumbs.thumbnail(sha256=original.sha256, mime=original.info.mime, size=size)


def test_it_makes_a_real_image_no_larger_than_the_size(data_dir: Path):
    original = stored(png_bytes(1, size=(900, 600)))

    path = thumb_of(original, 256)

    assert path == data_dir / "thumbs" / f"{original.sha256}-256-v3.webp"
    with Image.open(path) as img:
        img.load()
        assert img.format == "WEBP"
        assert img.size == (256, 171)  # the aspect ratio is kept


def test_it_never_enlarges_a_small_image():
    original = stored(png_bytes(2, size=(40, 30)))

    with Image.open(thumb_of(original, 512)) as img:
        assert img.size == (40, 30)


def test_it_keeps_transparency():
    img = Image.new("RGBA", (64, 64), (0, 0, 0, 0))
    img.putpixel((10, 10), (255, 0, 0, 255))
    out = io.BytesIO()
    img.save(out, "PNG")

    with Image.open(thumb_of(stored(out.getvalue()), 128)) as thumb:
        assert thumb.mode == "RGBA"
        assert thumb.getpixel((0, 0))[3] == 0


def test_it_serves_the_cached_file_without_reading_the_original(monkeypatch):
    original = stored(png_bytes(3))
    first = thumb_of(original, 128)
    made = first.stat().st_mtime_ns

    def refuse(*args: Any, **kwargs: Any) -> bytes:
        raise AssertionError("the original was read for a cached thumbnail")

    monkeypatch.setattr(originals, "read", refuse)
    again = thumb_of(original, 128)

    assert again == first
    assert again.stat().st_mtime_ns == made


def test_it_rebuilds_a_thumbnail_whose_cache_file_was_deleted():
    original = stored(png_bytes(4))
    path = thumb_of(original, 256)
    before = path.read_bytes()
    path.unlink()

    rebuilt = thumb_of(original, 256)

    assert rebuilt.read_bytes() == before


def test_it_keeps_one_file_per_size():
    original = stored(png_bytes(5, size=(600, 600)))

    sizes = {size: Image.open(thumb_of(original, size)).size for size in thumbs.SIZES}

    assert sizes == {128: (128, 128), 256: (256, 256), 512: (512, 512)}


def test_drawing_a_thumbnail_again_drops_the_earlier_renderings_of_that_size():
    """Noted by a review: a thumbnail of an earlier rendering stayed on disk for good."""
    original = stored(png_bytes(6, size=(600, 600)))
    folder = thumbs.thumbs_dir()
    folder.mkdir(parents=True, exist_ok=True)
    older = [f"{original.sha256}-256.webp", f"{original.sha256}-256-v1.webp"]
    for name in older:
        (folder / name).write_bytes(b"an earlier rendering")
    other_size = thumb_of(original, 128)

    current = thumb_of(original, 256)

    left = sorted(path.name for path in folder.iterdir())
    assert left == sorted([current.name, other_size.name]), left


def test_it_leaves_no_temporary_files(data_dir: Path):
    for seed in range(5):
        thumb_of(stored(png_bytes(seed)), 128)

    names = [p.name for p in (data_dir / "thumbs").iterdir()]
    assert len(names) == 5
    assert all(name.endswith("-128-v3.webp") and not name.startswith(".") for name in names)


def test_it_removes_its_temporary_file_when_the_write_fails(data_dir: Path, monkeypatch):
    original = stored(png_bytes(6))

    def broken_replace(src: Any, dst: Any) -> None:
        raise OSError("disk said no")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(thumbs.NotCached) as drawn:  # drawn, not kept: shown all the same
        thumb_of(original, 128)

    assert list((data_dir / "thumbs").iterdir()) == []
    assert isinstance(drawn.value.__cause__, OSError) and drawn.value.data[:4] == b"RIFF"


def test_it_writes_the_whole_file_before_giving_it_its_name(data_dir: Path, monkeypatch):
    original = stored(png_bytes(7))
    seen: list[tuple[str, int]] = []
    real_replace = os.replace

    def watching_replace(src: Any, dst: Any) -> None:
        seen.append((Path(src).name, Path(src).stat().st_size))
        assert not Path(dst).exists()
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", watching_replace)
    path = thumb_of(original, 128)

    [(temp_name, temp_size)] = seen
    assert temp_name.startswith(".") and temp_name.endswith(".tmp")
    assert temp_size == path.stat().st_size > 0


@pytest.mark.parametrize("fmt", ["WEBP", "GIF"])
def test_it_makes_a_still_of_an_animated_clips_first_frame(fmt: str):
    original = stored(animated(fmt))
    assert original.info.frames == 3

    with Image.open(thumb_of(original, 128)) as thumb:
        assert getattr(thumb, "n_frames", 1) == 1
        assert not getattr(thumb, "is_animated", False)
        red, green, blue = thumb.convert("RGB").getpixel((thumb.width // 2, thumb.height // 2))
        assert red > 200 and green < 60 and blue < 60


def test_it_refuses_sizes_and_names_it_does_not_make():
    with pytest.raises(ValueError):
        thumbs.path_for("ab" * 32, 4096)
    with pytest.raises(ValueError):
        thumbs.path_for("../../etc/passwd", 128)


def test_it_says_when_the_original_is_missing():
    original = stored(png_bytes(8))
    original.path.unlink()

    with pytest.raises(FileNotFoundError):
        thumb_of(original, 128)


RENDER_PROBE = """
import io, resource, sys
import django
django.setup()
from PIL import Image
from studio import thumbs

out = io.BytesIO()
# 40 million pixels, the largest still the store takes; one colour, so the file is small.
Image.new("RGB", (8000, 5000), (120, 90, 60)).save(out, "JPEG", quality=90)
data = out.getvalue()
small = io.BytesIO()
Image.new("RGB", (64, 64)).save(small, "JPEG")
thumbs.render(small.getvalue(), 128)  # Pillow's plugins loaded before measuring
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
thumbs.render(data, int(sys.argv[1]))
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024)
"""


@pytest.mark.parametrize("size", thumbs.SIZES)
def test_a_large_jpegs_thumbnail_is_decoded_at_a_fraction_of_its_size(tmp_path, size):
    """A 40-megapixel JPEG decodes to 120 MB in full; its thumbnail needs an eighth of that."""
    done = run_snippet(RENDER_PROBE, str(size), data_dir=tmp_path)
    grown = float(done.stdout.strip().splitlines()[-1])
    assert grown < 40, f"memory grew by {grown:.0f} MB for a {size} px thumbnail (bound: 40 MB)"


def test_no_more_images_are_decoded_at_once_than_the_setting_allows(monkeypatch, settings):
    """Every full decode (an upload's check, a thumbnail) waits its turn: memory stays bounded."""
    active = 0
    most = 0
    lock = threading.Lock()
    real_load = ImageFile.ImageFile.load

    def slow_load(self: Any) -> Any:
        nonlocal active, most
        with lock:
            active += 1
            most = max(most, active)
        try:
            time.sleep(0.05)
            return real_load(self)
        finally:
            with lock:
                active -= 1

    monkeypatch.setattr(ImageFile.ImageFile, "load", slow_load)
    data = png_bytes(5, size=(300, 200))
    work = [lambda: originals.inspect(data), lambda: thumbs.render(data, 128)] * 4
    threads = [threading.Thread(target=job) for job in work]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert 1 <= most <= settings.AVATARS_DECODES_AT_ONCE, (
        f"{most} images decoded at once (bound: {settings.AVATARS_DECODES_AT_ONCE})"
    )


def phone_photo(orientation: int) -> bytes:
    """Return a JPEG stored as a phone saves a portrait: landscape pixels, red on the left
    and blue on the right, and an EXIF Orientation saying how to turn it to show it."""
    img = Image.new("RGB", (400, 200), (0, 0, 255))
    img.paste((255, 0, 0), (0, 0, 200, 200))
    exif = Image.Exif()
    exif[0x0112] = orientation
    out = io.BytesIO()
    img.save(out, "JPEG", quality=95, exif=exif)
    return out.getvalue()


def test_a_phone_portrait_is_shown_upright(data_dir: Path):
    """Found by a review in a browser: every portrait phone photo was shown sideways."""
    original = stored(phone_photo(6))  # 6: turn 90 degrees clockwise to show it

    with Image.open(thumb_of(original, 128)) as img:
        width, height = img.size
        top, bottom = img.getpixel((width // 2, 5)), img.getpixel((width // 2, height - 5))

    assert height > width, f"a portrait's thumbnail is {width} x {height}: sideways"
    # Turned clockwise, the left (red) half of the pixels is on top.
    assert top[0] > 200 and top[2] < 60, top
    assert bottom[2] > 200 and bottom[0] < 60, bottom


def test_a_thumbnail_cached_by_an_earlier_rendering_is_not_served_again(data_dir: Path):
    """Thumbnails cached before portraits were turned stayed sideways (noticed after the fix):
    a new rendering has names of its own, so the old file is never taken for it."""
    original = stored(phone_photo(6))
    mime = original.info.mime
    earlier = thumbs.thumbs_dir() / f"{original.sha256}-128{thumbs.EXTENSION}"
    earlier.parent.mkdir(parents=True, exist_ok=True)
    sideways = io.BytesIO()
    Image.new("RGB", (128, 64), (0, 255, 0)).save(sideways, "WEBP")
    earlier.write_bytes(sideways.getvalue())

    path = thumbs.thumbnail(sha256=original.sha256, mime=mime, size=128)

    assert path != earlier
    with Image.open(path) as img:
        assert img.height > img.width, f"served {img.size}: the earlier, sideways rendering"


def test_forgetting_an_original_removes_its_thumbnails_of_every_size_and_rendering(
    data_dir: Path,
):
    original, other = stored(png_bytes(1)), stored(png_bytes(2))
    made = [thumb_of(original, size) for size in thumbs.SIZES] + [thumb_of(other, 128)]
    earlier = thumbs.thumbs_dir() / f"{original.sha256}-256{thumbs.EXTENSION}"
    earlier.write_bytes(made[1].read_bytes())

    thumbs.forget(original.sha256)

    left = sorted(path.name for path in thumbs.thumbs_dir().iterdir())
    assert left == [made[-1].name], f"left behind: {left}"


def with_profile(icc: bytes, *, fmt: str = "WEBP", mode: str = "RGB") -> bytes:
    out = io.BytesIO()
    Image.new(mode, (64, 64), 128).save(out, fmt, icc_profile=icc)
    return out.getvalue()


@pytest.mark.parametrize("fmt", ["WEBP", "JPEG"])
def test_a_large_colour_profile_stays_with_the_original_not_its_thumbnails(fmt: str):
    """Found by a review over uvicorn: a 64-pixel WebP carrying a 24 MB profile had three
    25 MB thumbnails, each read whole into memory whenever a page showed it."""
    icc = b"\0" * 16 + b"RGB " + os.urandom(4 * 1024 * 1024)
    original = stored(with_profile(icc, fmt=fmt))

    for size in thumbs.SIZES:
        path = thumb_of(original, size)
        assert path.stat().st_size < 20_000, f"{size}: {path.stat().st_size:,} bytes"
        with Image.open(path) as img:
            assert "icc_profile" not in img.info


def test_a_small_rgb_profile_is_kept_and_one_of_another_colour_space_is_not():
    from PIL import ImageCms

    srgb = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    gray = b"\0" * 16 + b"GRAY" + b"\0" * 200
    kept = stored(with_profile(srgb))
    left_out = stored(with_profile(gray, fmt="JPEG", mode="L"))

    with Image.open(thumb_of(kept, 128)) as img:
        assert img.info.get("icc_profile") == srgb
    with Image.open(thumb_of(left_out, 128)) as img:  # its pixels are RGB now
        assert img.mode == "RGB" and "icc_profile" not in img.info


def test_requests_for_one_missing_thumbnail_at_once_draw_it_once(data_dir: Path, monkeypatch):
    """Found by a hostile-files review: 8 requests at once for one uncached thumbnail each
    decoded the original (9.3 s of CPU for a heavy one); the others now wait and take it."""
    original = stored(png_bytes(7, size=(900, 600)))
    drawn: list[int] = []
    draw = thumbs.render

    def slow(data: bytes, size: int) -> bytes:
        drawn.append(size)
        time.sleep(0.2)  # long enough that every request arrives while it draws
        return draw(data, size)

    monkeypatch.setattr(thumbs, "render", slow)
    paths: list[Path] = []
    threads = [
        threading.Thread(target=lambda: paths.append(thumb_of(original, 256))) for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(paths) == 8 and len(set(paths)) == 1
    assert drawn == [256], f"drawn {len(drawn)} times for 8 requests at once"
