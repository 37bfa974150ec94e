"""A photo removed while a backup runs (docs/operations.md, studio/removals.py).

Found by a review: removed after the backup's snapshot, before its originals were copied,
the photo's original was reported "missing in the data dir" (damage that was not there),
and the restored install named a file it never got back.
"""

from pathlib import Path

import pytest
from django.db import connection

from studio import backups, curation, engine, originals, removals
from studio.models import Asset
from tests.backup_parts import file_of, manifest, run
from tests.factories import png_bytes

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_photo_removed_after_the_snapshot_is_in_the_backup_and_gone_after_it(
    tmp_path, monkeypatch, subject
):
    photo = subject.assets.get()
    snapshot = "copy_sqlite" if connection.vendor == "sqlite" else "dump_postgres"
    real = getattr(backups, snapshot)

    def removed_right_after(*args: object) -> None:
        real(*args)
        curation.remove_photo(photo=photo, subject=subject)
        assert file_of(photo).is_file(), "unlinked under the running backup"

    monkeypatch.setattr(backups, snapshot, removed_right_after)
    dest = tmp_path / "backup"

    code, out = run("backup", str(dest))

    assert code == 0, out
    assert "missing in the data dir" not in out
    assert photo.sha256 in [o["sha256"] for o in manifest(dest)["originals"]]
    copy = (dest / "originals" / file_of(photo).name).read_bytes()
    assert originals.sha256_of(copy) == photo.sha256
    assert not Asset.objects.filter(pk=photo.pk).exists()
    assert not file_of(photo).exists(), "the removal was never finished"
    assert not (Path(originals.originals_dir().parent) / removals.PENDING).exists()


def test_a_removal_held_off_by_a_backup_keeps_a_file_uploaded_again_meanwhile(
    make_subject, data_dir
):
    ada, bo = make_subject("Ada"), make_subject("Bo")
    kept = engine.add_reference(subject=ada, data=png_bytes(41), file_name="kept.png")
    gone = engine.add_reference(subject=ada, data=png_bytes(42), file_name="gone.png")

    with removals.backing_up():
        curation.remove_photo(photo=kept, subject=ada)
        curation.remove_photo(photo=gone, subject=ada)
        assert file_of(kept).is_file() and file_of(gone).is_file()
        pending = (data_dir / removals.PENDING).read_text()
        assert kept.sha256 in pending and gone.sha256 in pending
        # The same bytes come back as Bo's photo before the backup ends.
        engine.add_reference(subject=bo, data=png_bytes(41), file_name="kept-again.png")
        assert removals.finish_pending() == 0, "a backup still runs"

    assert removals.finish_pending() == 1
    assert file_of(kept).is_file(), "a file a row stands on again was unlinked"
    assert not file_of(gone).exists()
    assert not (data_dir / removals.PENDING).exists()
