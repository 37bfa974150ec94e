"""The scrub and what stands in an original's place: a symbolic link, a folder.

Found by a review: a link to the right bytes elsewhere passed the check, though the
archive no longer held them; a folder was reported, but its repair could never work.
"""

import os
from pathlib import Path

import pytest

from studio import originals
from studio.models import ScrubReport
from tests.factories import png_bytes
from tests.scrub_parts import a_backup_holding, check, ember_sends, file_of, generated, uploaded

pytestmark = pytest.mark.django_db


def linked_elsewhere(path: Path, elsewhere: Path) -> Path:
    """Move the original at `path` into the folder `elsewhere` and leave a link in its place."""
    elsewhere.mkdir(exist_ok=True)
    target = elsewhere / path.name
    path.rename(target)
    path.symlink_to(target)
    return target


def test_it_calls_an_original_that_is_a_link_to_its_bytes_elsewhere_corrupt(tmp_path):
    asset = uploaded(1)
    path = file_of(asset)
    target = linked_elsewhere(path, tmp_path / "elsewhere")

    code, out = check()

    assert code == 1
    assert (
        f"corrupt: {path.name} (a symbolic link to {target}, not a file of its own; "
        f"if {target} goes, the original goes with it; named by uploaded asset {asset.pk})"
    ) in out
    assert out.splitlines()[-2] == "Checked 1 original: 1 corrupt."
    report = ScrubReport.objects.latest()
    assert (report.corrupt, report.passed) == (1, False)


def test_it_copies_the_bytes_a_link_points_to_into_the_archive(ember, tmp_path):
    asset = uploaded(1)
    path = file_of(asset)
    target = linked_elsewhere(path, tmp_path / "elsewhere")

    code, out = check("--repair")

    assert code == 0, out
    assert not ember.calls
    assert (
        f"repaired: {path.name} (copied into the archive from {target}, "
        "the file the link pointed to)"
    ) in out
    assert out.splitlines()[-1] == "Checked 1 original: 1 corrupt; repaired 1."
    assert not path.is_symlink()
    assert path.read_bytes() == png_bytes(1)
    assert target.read_bytes() == png_bytes(1)  # the file it pointed to is left alone
    target.unlink()
    assert check() == (0, "Checked 1 original: all present and matching their hashes.\n")


def test_it_fetches_from_ember_what_a_link_to_other_bytes_stands_for(ember, tmp_path):
    asset = generated(7, "img_7")
    path = file_of(asset)
    target = linked_elsewhere(path, tmp_path / "elsewhere")
    target.write_bytes(png_bytes(8))
    route = ember_sends(ember, png_bytes(7))

    code, out = check("--repair")

    assert code == 0, out
    assert f"corrupt: {path.name} (a symbolic link to {target}: hashes to another value;" in out
    assert route.call_count == 1
    assert f"repaired: {path.name} (fetched again from Ember, image img_7)" in out
    assert not path.is_symlink()
    assert path.read_bytes() == png_bytes(7)
    assert target.read_bytes() == png_bytes(8)


def test_it_calls_a_link_to_nothing_missing_and_puts_the_original_back(ember, tmp_path):
    asset = uploaded(1)
    path = file_of(asset)
    backup = a_backup_holding(tmp_path, asset)
    target = linked_elsewhere(path, tmp_path / "elsewhere")
    target.unlink()

    code, out = check("--repair", "--from-backup", str(backup))

    assert code == 0, out
    assert f"missing: {path.name} (a symbolic link to {target}, which is not there;" in out
    assert f"repaired: {path.name} (put back from the backup {backup})" in out
    assert not path.is_symlink()
    assert path.read_bytes() == png_bytes(1)


def a_folder_in_place_of(path: Path) -> Path:
    """Put a folder holding someone's file where the original at `path` was."""
    path.unlink()
    path.mkdir()
    kept = path / "notes.txt"
    kept.write_text("someone's notes")
    return kept


def test_it_says_to_move_a_folder_aside_and_asks_ember_nothing(ember):
    asset = generated(7, "img_7")
    path = file_of(asset)
    kept = a_folder_in_place_of(path)
    route = ember_sends(ember, png_bytes(7))

    code, out = check("--repair")

    assert code == 1
    assert not route.called  # its bytes could not have been written over a folder
    assert (
        f"corrupt: {path.name} (a folder is in its place: move it aside, then run "
        f"check_originals --repair; named by generated asset {asset.pk})"
    ) in out
    assert (
        f"not repaired: {path.name} (a folder is in its place, left as it is (it may hold "
        "someone's files): move it aside, then run check_originals --repair again)"
    ) in out
    assert kept.read_text() == "someone's notes"
    assert ScrubReport.objects.latest().unrepaired == 1


def test_it_puts_an_upload_back_from_a_backup_once_the_folder_is_moved_aside(ember, tmp_path):
    asset = uploaded(1)
    path = file_of(asset)
    backup = a_backup_holding(tmp_path, asset)
    kept = a_folder_in_place_of(path)

    code, out = check("--repair", "--from-backup", str(backup))

    assert code == 1
    assert (
        f"not repaired: {path.name} (a folder is in its place, left as it is (it may hold "
        f"someone's files): move it aside, then run check_originals --repair "
        f"--from-backup {backup} again)"
    ) in out
    assert "corrupt in the backup" not in out  # the backup's copy is fine
    assert kept.read_text() == "someone's notes"

    os.rename(path, tmp_path / "moved aside")
    code, out = check("--repair", "--from-backup", str(backup))

    assert code == 0, out
    assert originals.file_sha256(path) == asset.sha256
    assert (tmp_path / "moved aside" / "notes.txt").read_text() == "someone's notes"
