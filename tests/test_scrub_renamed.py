"""An original moved to another name within originals/ (studio/renamed.py).

Found by a review: `check_originals` listed the original "missing" and the renamed file
"no row", side by side, and `--repair` asked Ember (which may have let go of its copy
since) or gave up on an upload, with the bytes right there.
"""

import httpx
import pytest

from studio import originals
from tests.factories import png_bytes
from tests.scrub_parts import check, file_of, flip_a_byte, generated, uploaded

pytestmark = pytest.mark.django_db

GONE = {"error": {"code": "not_found", "message": "No such image."}}


def test_it_says_where_a_renamed_original_is():
    asset = uploaded(1)
    generated(2)
    path = file_of(asset)
    path.rename(path.with_name("ada (copy).png"))

    code, out = check()

    assert code == 1
    assert (
        f"missing: {path.name} (no file; named by uploaded asset {asset.pk}; its bytes are in "
        "ada (copy).png, a file no row names)"
    ) in out, out
    assert f"no row: ada (copy).png (the bytes of {path.name}, which is missing)" in out, out


def test_a_repair_copies_a_renamed_upload_back_and_asks_ember_nothing(ember):
    asset = uploaded(1)
    generated(2)
    path = file_of(asset)
    renamed = path.with_name("ada (copy).png")
    path.rename(renamed)

    code, out = check("--repair")

    assert code == 0, out
    assert not ember.calls
    assert originals.sha256_of(path.read_bytes()) == asset.sha256
    assert renamed.read_bytes() == path.read_bytes(), "the file it was found in is left as it was"
    assert f"repaired: {path.name} (copied back from ada (copy).png, a file no row names " in out


def test_a_repair_takes_a_generated_original_ember_let_go_of_from_its_other_name(ember):
    asset = generated(7, "img_7")
    generated(2)
    path = file_of(asset)
    path.rename(path.with_name("keep-this.png"))
    gone = ember.get("/api/v1/images/img_7/file").mock(return_value=httpx.Response(404, json=GONE))

    code, out = check("--repair")

    assert code == 0, out
    assert not gone.called, "Ember was asked for bytes the archive holds"
    assert originals.sha256_of(path.read_bytes()) == asset.sha256


def test_a_corrupt_original_is_put_back_from_a_copy_of_it_under_another_name(ember):
    asset = uploaded(1)
    generated(2)
    path = file_of(asset)
    path.with_name("before-the-crash.png").write_bytes(path.read_bytes())
    flip_a_byte(path)

    code, out = check("--repair")

    assert code == 0, out
    assert originals.sha256_of(path.read_bytes()) == asset.sha256
    assert f"repaired: {path.name} (copied back from before-the-crash.png," in out


def test_every_original_renamed_is_no_disk_not_mounted(ember):
    """With none of its originals under their names, the folder counts as a disk not mounted
    and nothing is repaired into it; unless every one of them is there under another name."""
    assets = [uploaded(1), uploaded(2)]
    for n, asset in enumerate(assets):
        file_of(asset).rename(file_of(asset).with_name(f"photo-{n}.png"))

    code, out = check("--repair")

    assert code == 0, out
    assert "holds none of its originals" not in out
    assert all(originals.sha256_of(file_of(a).read_bytes()) == a.sha256 for a in assets)


def test_a_file_with_other_bytes_is_not_taken_for_the_original(ember):
    asset = uploaded(1)
    generated(2)
    path = file_of(asset)
    path.unlink()
    path.with_name("look-alike.png").write_bytes(png_bytes(3))

    code, out = check("--repair")

    assert code == 1
    assert not path.exists()
    assert "its bytes are in" not in out
    assert f"not repaired: {path.name} (an uploaded photo: Ember has no copy;" in out


def test_it_finds_an_original_moved_into_a_folder_within_originals(ember):
    """Left by the last session: an original moved into a subfolder (a file manager's
    "New folder", a sync tool's) was "missing" beside a folder "no row", and a repair asked
    Ember for bytes the archive held. The folder's files are hashed like the strays."""
    asset = uploaded(1)
    generated(2)
    path = file_of(asset)
    folder = path.parent / "sorted" / "2026"
    folder.mkdir(parents=True)
    path.rename(folder / "ada.png")

    code, out = check()

    assert code == 1
    assert "its bytes are in sorted/2026/ada.png, a file no row names)" in out, out
    assert f"no row: sorted (sorted/2026/ada.png holds the bytes of {path.name}" in out, out

    code, out = check("--repair")

    assert code == 0, out
    assert not ember.calls
    assert originals.sha256_of(path.read_bytes()) == asset.sha256
    assert (folder / "ada.png").read_bytes() == path.read_bytes(), "left as it was"
    assert f"repaired: {path.name} (copied back from sorted/2026/ada.png, a file " in out


def test_the_files_looked_at_in_folders_no_row_names_are_bounded(ember, monkeypatch):
    """A folder of many files (a photo library copied in by mistake) costs at most
    renamed.WALK_MOST reads; the original beyond them is said missing, as before."""
    from studio import renamed

    monkeypatch.setattr(renamed, "WALK_MOST", 3)
    asset = uploaded(1)
    generated(2)
    path = file_of(asset)
    library = path.parent / "library"
    library.mkdir()
    for n in range(5):
        (library / f"a{n}.png").write_bytes(png_bytes(10 + n))
    path.rename(library / "z-last.png")
    read = []
    real = originals.read_regular
    monkeypatch.setattr(originals, "read_regular", lambda p, **kw: read.append(p) or real(p, **kw))

    code, out = check()

    assert code == 1
    walked = [p for p in read if library in p.parents]
    assert len(walked) == 3, f"{len(walked)} files read in folders no row names, at most 3"
    assert "its bytes are in" not in out
    # Said, not silent: a review's repair sent the operator to a backup while the bytes
    # were in a folder the walk had stopped in.
    assert (
        f"missing: {path.name} (no file; named by uploaded asset {asset.pk}; the walk through "
        "folders no row names stopped at 3 entries before searching all of library: its "
        "bytes may be there)"
    ) in out, out
    assert "no row: library (not searched in full (3 entries at most))" in out, out


def test_a_renamed_file_is_found_whatever_folders_use_up_the_walk(ember, monkeypatch):
    """Found by a re-review: the walk's budget, used up in a folder listed first, ended the
    search before a renamed original beside it was hashed."""
    from studio import renamed

    monkeypatch.setattr(renamed, "WALK_MOST", 3)
    asset = uploaded(1)
    generated(2)
    path = file_of(asset)
    for name in ("a-library", "b-library", "c-library"):
        (path.parent / name).mkdir()
        for n in range(5):
            (path.parent / name / f"{n}.png").write_bytes(png_bytes(20 + n))
    path.rename(path.with_name("zz (copy).png"))

    code, out = check()

    assert code == 1
    assert "its bytes are in zz (copy).png, a file no row names)" in out, out
    assert "not searched in full" not in out, "found before the walk had to stop"


def test_a_deep_tree_of_empty_folders_counts_against_the_walk(ember, monkeypatch):
    from studio import renamed

    monkeypatch.setattr(renamed, "WALK_MOST", 50)
    asset = uploaded(1)
    generated(2)
    path = file_of(asset)
    deep = path.parent / "deep"
    for n in range(200):
        (deep / f"{n:03d}").mkdir(parents=True)
    (deep / "999").mkdir()
    path.rename(deep / "999" / "ada.png")  # after 200 empty folders: past the walk

    code, out = check()

    assert code == 1
    assert "its bytes are in" not in out, "the 200 empty folders counted"
