"""check_originals refuses bad arguments up front, and its advice fits why a repair failed."""

import httpx
import pytest

from studio import scrub
from studio.models import ScrubReport
from tests.scrub_parts import check, file_of, generated, uploaded

pytestmark = pytest.mark.django_db


@pytest.fixture
def no_hashing(monkeypatch):
    """Fail the test if the originals are re-hashed: a refusal must come before that."""

    def hashes(*args, **kwargs):
        raise AssertionError("every original was re-hashed before the arguments were checked")

    monkeypatch.setattr(scrub, "check", hashes)


def test_from_backup_without_repair_is_refused_before_any_original_is_hashed(no_hashing, tmp_path):
    """Found by a review: the refusal came only after every original had been re-hashed."""
    code, out = check("--from-backup", str(tmp_path))

    assert code == 2
    assert "--from-backup goes with --repair." in out


def test_a_backup_folder_that_does_not_exist_is_refused_up_front(ember, no_hashing, tmp_path):
    """Found by a review: each line then said "(not in the backup /nonexistent either)"."""
    missing = tmp_path / "nonexistent"

    code, out = check("--repair", "--from-backup", str(missing))

    assert code == 2
    assert out == f"--from-backup {missing}: there is no such folder.\n"
    assert not ember.calls
    assert not ScrubReport.objects.exists()


def test_a_folder_that_is_not_a_backup_is_refused_up_front(ember, no_hashing, tmp_path):
    code, out = check("--repair", "--from-backup", str(tmp_path))

    assert code == 2
    assert out == (f"--from-backup {tmp_path}: not a backup folder (it has no originals folder).\n")


def test_a_file_named_as_the_backup_is_refused_up_front(ember, no_hashing, tmp_path):
    named = tmp_path / "backup.tar"
    named.write_bytes(b"not a folder")

    code, out = check("--repair", "--from-backup", str(named))

    assert code == 2
    assert out == f"--from-backup {named}: not a folder.\n"


def test_a_backup_whose_originals_is_a_file_is_refused_up_front(ember, no_hashing, tmp_path):
    (tmp_path / "originals").write_bytes(b"")

    code, out = check("--repair", "--from-backup", str(tmp_path))

    assert code == 2
    assert "not a backup folder (it has no originals folder)" in out


def test_it_says_to_run_again_when_ember_could_not_be_reached(ember):
    """Found by a review: it advised a backup, as if Ember had said the image was gone."""
    asset = generated(7)
    file_of(asset).unlink()
    ember.get("/api/v1/images/img_7/file").mock(side_effect=httpx.ConnectError("refused"))

    code, out = check("--repair")

    assert code == 1
    assert f"not repaired: {file_of(asset).name} (Ember could not be reached" in out
    assert "restore it from a backup" not in out
    assert "run check_originals --repair again when Ember answers)" in out


@pytest.mark.parametrize(
    ("status", "message", "said", "advice"),
    [
        (
            401,
            "Missing or wrong bearer token.",
            "Missing or wrong bearer token (image img_7)",
            "run check_originals --repair again when Ember answers",
        ),
        (404, "Image img_7 no longer exists.", "Ember no longer has image img_7", None),
    ],
)
def test_it_advises_a_backup_only_when_ember_says_the_image_is_gone(
    ember, status, message, said, advice
):
    asset = generated(7)
    file_of(asset).unlink()
    ember.get("/api/v1/images/img_7/file").respond(status, json={"error": {"message": message}})

    code, out = check("--repair")

    assert code == 1
    advice = advice or "restore it from a backup"
    assert f"not repaired: {file_of(asset).name} ({said}; {advice})" in out


def test_an_upload_still_points_to_a_backup(ember):
    asset = uploaded(1)
    file_of(asset).unlink()

    code, out = check("--repair")

    assert code == 1
    assert "(an uploaded photo: Ember has no copy; restore it from a backup)" in out
