"""The originals scrub: `manage.py check_originals [--repair]` (docs/operations.md)."""

import os
import shutil
import time
from pathlib import Path

import httpx
import pytest

from studio import originals
from studio.models import Asset, Origin, ScrubReport
from tests.factories import png_bytes
from tests.scrub_parts import (
    a_backup_holding,
    check,
    ember_sends,
    file_of,
    flip_a_byte,
    generated,
    uploaded,
)

pytestmark = pytest.mark.django_db


def test_it_passes_a_store_whose_every_original_matches_its_hash():
    generated(1)
    uploaded(2)

    code, out = check()

    assert code == 0
    assert out.splitlines()[-1] == "Checked 2 originals: all present and matching their hashes."


def test_it_hashes_a_file_two_rows_share_once():
    first = generated(1, "img_a")
    Asset.objects.create(
        **{f: getattr(first, f) for f in ("sha256", "mime", "width", "height", "size")},
        file_name="again.png",
        origin=Origin.GENERATED,
        ember_image_id="img_b",
    )

    code, out = check()

    assert code == 0
    assert "Checked 1 original:" in out


def test_it_finds_a_flipped_byte_and_exits_non_zero():
    asset = generated(1)
    generated(2)
    flip_a_byte(file_of(asset))

    code, out = check()

    assert code == 1
    assert f"corrupt: {file_of(asset).name}" in out
    assert "Checked 2 originals: 1 corrupt." in out


def test_it_finds_a_deleted_file_and_exits_non_zero():
    asset = uploaded(1)
    file_of(asset).unlink()

    code, out = check()

    assert code == 1
    assert f"missing: {file_of(asset).name}" in out
    assert "Checked 1 original: 1 missing." in out


def test_it_says_when_the_originals_folder_itself_is_gone(tmp_path):
    """Found by a review: with the folder gone (a disk not mounted), it listed every file
    as missing and never said the folder was not there."""
    generated(1)
    uploaded(2)
    folder = originals.originals_dir()
    folder.rename(tmp_path / "aside")
    try:
        code, out = check()
    finally:
        (tmp_path / "aside").rename(folder)

    assert code == 1
    assert (
        f"Checked 2 originals: 2 missing. The folder {folder} itself is not there (a disk "
        "not mounted?): put it back before repairing its files one by one.\n"
    ) in out


def test_it_repairs_nothing_while_the_originals_folder_itself_is_gone(ember, tmp_path):
    """Found by a review: with the folder gone, --repair made a new one (on the mount point
    of a disk not mounted) and fetched every generated original into it from Ember, then
    said to put the folder back first."""
    asset = generated(1, "img_7")
    fetched = ember_sends(ember, png_bytes(1))
    folder = originals.originals_dir()
    folder.rename(tmp_path / "aside")
    try:
        code, out = check("--repair")
        made = folder.exists()
    finally:
        if folder.exists():
            folder.rename(tmp_path / "made")
        (tmp_path / "aside").rename(folder)

    assert code == 1
    assert not made, "a new originals folder was made"
    assert not fetched.called, "Ember was asked for the original"
    assert f"Nothing was repaired: the folder {folder} itself is not there" in out
    assert file_of(asset).read_bytes() == png_bytes(1)  # the real folder, untouched


def test_it_repairs_nothing_into_an_originals_folder_left_empty(ember, tmp_path):
    """Found by a review: a disk not mounted leaves its mount point, an empty folder, not
    none; --repair fetched every generated original from Ember onto it, to hide under the
    disk once mounted."""
    assets = [generated(1, "img_7"), generated(2, "img_8")]
    fetched = ember_sends(ember, png_bytes(1))
    folder = originals.originals_dir()
    folder.rename(tmp_path / "aside")
    folder.mkdir()
    (folder / "lost+found").mkdir()  # as mkfs leaves the root of a disk
    (folder / "NOT-MOUNTED").write_text("")  # a sentinel some leave on a mount point (a review)
    try:
        code, out = check("--repair")
        left = sorted(p.name for p in folder.iterdir())
    finally:
        shutil.rmtree(folder)
        (tmp_path / "aside").rename(folder)

    assert code == 1
    assert not fetched.called, "Ember was asked for an original"
    assert left == ["NOT-MOUNTED", "lost+found"], left
    assert (
        f"Checked 2 originals: 2 missing, 1 file with no row. The folder {folder} holds none of "
        "its originals (a disk "
        "not mounted?): put it back before repairing its files one by one.\n"
    ) in out
    assert (
        f"Nothing was repaired: the folder {folder} holds none of its originals. Put it back "
        "(mount its disk), then run this again. If it is meant to be empty (a new disk for "
        "the originals), run this with --into-empty."
    ) in out
    assert all(file_of(asset).exists() for asset in assets)


BOUND = 5.0  # seconds for a check of two originals, whatever stands in one's place


@pytest.mark.parametrize("odd", ["a pipe", "a link to /dev/zero", "a folder"])
def test_it_calls_corrupt_what_is_no_regular_file_without_opening_it(odd):
    """Found by a review: a pipe in an original's place hung the nightly check for ever,
    and a link to /dev/zero read without end."""
    asset = uploaded(1)
    generated(2)
    path = file_of(asset)
    path.unlink()
    if odd == "a pipe":
        os.mkfifo(path)
    elif odd == "a folder":
        path.mkdir()
    else:
        path.symlink_to("/dev/zero")
    started = time.monotonic()

    code, out = check()

    took = time.monotonic() - started
    assert took < BOUND, f"the check took {took:.1f} s (bound {BOUND} s)"
    assert code == 1
    assert f"corrupt: {path.name}" in out
    assert "Checked 2 originals: 1 corrupt." in out


def test_it_reports_a_file_no_row_names_but_exits_zero():
    generated(1)
    orphan = originals.save(png_bytes(99))

    code, out = check()

    assert code == 0
    assert f"no row: {orphan.path.name}" in out
    assert "Checked 1 original: 1 file with no row." in out


def test_a_mounted_disk_s_lost_and_found_is_no_stray(data_dir: Path):
    """The originals on a disk of their own: its root holds what mkfs made there."""
    generated(1)
    (data_dir / "originals" / "lost+found").mkdir()

    code, out = check()

    assert code == 0
    assert "lost+found" not in out
    assert "Checked 1 original: all present and matching their hashes." in out, out


def test_it_reports_a_stray_temporary_file_but_exits_zero(data_dir: Path):
    generated(1)
    stray = data_dir / "originals" / f".{'a' * 64}.png.0123456789ab.tmp"
    stray.write_bytes(b"half a write")
    an_hour_ago = time.time() - 3600
    os.utime(stray, (an_hour_ago, an_hour_ago))

    code, out = check()

    assert code == 0
    assert f"temporary: {stray.name} (60 minutes old" in out
    assert "1 temporary file." in out
    assert stray.exists()  # reported, not removed: the worker sweeps them at start


def test_it_records_each_scrub_for_the_admin():
    good = generated(1)
    bad = generated(2)
    flip_a_byte(file_of(bad))
    file_of(good).unlink()

    check()

    report = ScrubReport.objects.latest()
    assert (report.checked, report.missing, report.corrupt, report.orphans) == (2, 1, 1, 0)
    assert report.passed is False
    assert report.summary == "Checked 2 originals: 1 missing, 1 corrupt."
    assert sorted(report.problems) == sorted(
        [
            f"missing: {file_of(good).name} (no file; named by generated asset {good.pk})",
            f"corrupt: {file_of(bad).name} (hashes to another value; "
            f"named by generated asset {bad.pk})",
        ]
    )
    assert report.finished_at >= report.started_at


def test_it_fetches_a_corrupt_generated_original_again_from_ember(ember):
    asset = generated(1, "img_7")
    flip_a_byte(file_of(asset))
    route = ember_sends(ember, png_bytes(1))

    code, out = check("--repair")

    assert code == 0
    assert route.call_count == 1
    assert originals.file_sha256(file_of(asset)) == asset.sha256
    assert f"repaired: {file_of(asset).name} (fetched again from Ember, image img_7)" in out
    assert out.splitlines()[-1] == "Checked 1 original: 1 corrupt; repaired 1."
    assert ScrubReport.objects.latest().passed is True


def test_it_fetches_a_missing_generated_original_again_from_ember(ember):
    asset = generated(1, "img_7")
    file_of(asset).unlink()
    ember_sends(ember, png_bytes(1))

    code, _out = check("--repair")

    assert code == 0
    assert file_of(asset).read_bytes() == png_bytes(1)


def test_it_refuses_bytes_from_ember_that_do_not_match_the_saved_hash(ember):
    asset = generated(1, "img_7")
    file_of(asset).unlink()
    ember_sends(ember, png_bytes(2))

    code, out = check("--repair")

    assert code == 1
    assert not file_of(asset).exists()
    assert f"not repaired: {file_of(asset).name} (The image Ember sent does not match" in out
    assert "Checked 1 original: 1 missing; 1 not repaired." in out
    assert ScrubReport.objects.latest().unrepaired == 1


def test_it_says_an_image_ember_no_longer_has_cannot_be_repaired(ember):
    asset = generated(1, "img_7")
    file_of(asset).unlink()
    gone = {"error": {"message": "Image img_7 no longer exists."}}
    ember.get("/api/v1/images/img_7/file").mock(return_value=httpx.Response(404, json=gone))

    code, out = check("--repair")

    assert code == 1
    assert f"not repaired: {file_of(asset).name} (Ember no longer has image img_7" in out


def test_it_says_an_upload_cannot_be_repaired_and_asks_ember_nothing(ember):
    asset = uploaded(1)
    flip_a_byte(file_of(asset))

    code, out = check("--repair")

    assert code == 1
    assert not ember.calls
    assert (
        f"not repaired: {file_of(asset).name} (an uploaded photo: Ember has no copy; "
        "restore it from a backup)"
    ) in out


def test_it_puts_a_damaged_upload_back_from_a_backup_and_asks_ember_nothing(ember, tmp_path):
    """Found by a review: an upload damaged in place had no supported way back."""
    flipped, lost = uploaded(1), uploaded(2)
    backup = a_backup_holding(tmp_path, flipped, lost)
    flip_a_byte(file_of(flipped))
    file_of(lost).unlink()

    code, out = check("--repair", "--from-backup", str(backup))

    assert code == 0, out
    assert not ember.calls
    for asset in (flipped, lost):
        assert f"repaired: {file_of(asset).name} (put back from the backup {backup})" in out
        assert originals.file_sha256(file_of(asset)) == asset.sha256
    assert check()[0] == 0


def test_it_takes_nothing_from_a_backup_whose_copy_is_damaged_too(ember, tmp_path):
    asset = uploaded(1)
    backup = a_backup_holding(tmp_path, asset)
    flip_a_byte(file_of(asset))
    flip_a_byte(backup / "originals" / file_of(asset).name)
    damaged = file_of(asset).read_bytes()

    code, out = check("--repair", "--from-backup", str(backup))

    assert code == 1
    assert f"not repaired: {file_of(asset).name} (corrupt in the backup {backup}" in out
    assert file_of(asset).read_bytes() == damaged  # nothing was written over it


@pytest.mark.parametrize("odd", ["a folder", "a pipe"])
def test_it_opens_nothing_but_a_regular_file_in_a_backup(ember, tmp_path, odd):
    """Found by a re-review: a folder stopped the whole repair, a pipe hung it."""
    asset, other = uploaded(1), uploaded(2)
    backup = a_backup_holding(tmp_path, other)
    copy = backup / "originals" / file_of(asset).name
    copy.mkdir() if odd == "a folder" else os.mkfifo(copy)
    file_of(asset).unlink()
    file_of(other).unlink()

    # Every original gone: meant so (else it is taken for a disk not mounted, below).
    code, out = check("--repair", "--from-backup", str(backup), "--into-empty")

    assert code == 1
    assert f"not repaired: {file_of(asset).name} (corrupt in the backup {backup}: not a " in out
    assert f"repaired: {file_of(other).name} (put back from the backup" in out  # went on


def test_it_falls_back_to_ember_for_a_generated_original_the_backup_lacks(ember, tmp_path):
    asset = generated(7)
    backup = a_backup_holding(tmp_path)
    route = ember_sends(ember, png_bytes(7))
    file_of(asset).unlink()

    code, out = check("--repair", "--from-backup", str(backup))

    assert code == 0, out
    assert route.called
    assert f"repaired: {file_of(asset).name} (fetched again from Ember, image img_7)" in out


def test_it_tells_the_admin_how_the_last_scrub_went():
    assert ScrubReport.status() == "no scrub of the originals yet: run manage.py check_originals"
    file_of(generated(1)).unlink()
    check()
    check()  # the same again: the last one is shown

    last = ScrubReport.objects.latest()
    assert ScrubReport.objects.count() == 2
    assert ScrubReport.status() == (
        f"last scrub {last.finished_at:%Y-%m-%d %H:%M} UTC: Checked 1 original: 1 missing."
    )
