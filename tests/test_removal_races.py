"""A photo's removal racing a save of the same bytes never loses the original (docs/design.md §7).

Found by a review: a removal looks for asset rows standing on the file, then unlinks it.
A save of identical bytes (an upload of the same photo, a result equal to it) may have
acknowledged the file already while its row is not written yet: the removal sees no row
and unlinks. Real commits here (not the test's one transaction), and the steps
interleaved by hand where the race would put them.
"""

import asyncio
import threading
from types import SimpleNamespace

import pytest
from django.db import transaction

from studio import curation, engine, originals, removals
from studio.engine import library, sets
from studio.engine.errors import InvalidRequest
from studio.models import Asset, Origin
from studio.worker import archive
from tests.factories import png_bytes

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_upload_of_the_bytes_being_removed_keeps_its_original(make_subject, monkeypatch):
    ada, bo = make_subject("Ada"), make_subject("Bo")
    data = png_bytes(31)
    photo = engine.add_reference(subject=ada, data=data, file_name="ada.png")
    real_save = originals.save

    def save_then_removed(stored: bytes, **how: bool) -> originals.Original:
        saved = real_save(stored, **how)  # acknowledges the file Ada's photo stands on
        # Ada's photo goes: its row, and after that commit its file (no row stands on it).
        curation.remove_photo(photo=photo, subject=ada)
        return saved

    monkeypatch.setattr(originals, "save", save_then_removed)
    upload = library.upload_reference(subject=bo, data=data, file_name="bo.png")

    assert not Asset.objects.filter(pk=photo.pk).exists()
    assert list(upload.asset.subjects.all()) == [bo]
    stored = originals.read(upload.asset.sha256, upload.asset.mime)  # raises when it is gone
    assert stored == data, "Bo's upload was acknowledged and its original is not what was sent"


def test_the_look_before_a_release_never_sees_a_file_a_removal_is_about_to_take(
    subject, monkeypatch
):
    """The worker's result equals a photo being removed; its look comes before the PATCH."""
    photo = subject.assets.get()
    data = originals.read(photo.sha256, photo.mime)
    path = originals.path_of(photo.sha256, photo.mime)
    saved = originals.save(data)  # the worker's copy: the file is there, acknowledged
    checked, go = threading.Event(), threading.Event()
    real_standing = removals.standing_on

    def standing(hashes: set[str]) -> set[str]:
        found = real_standing(hashes)  # no row yet: the worker's comes right after
        checked.set()
        go.wait(0.5)  # the worker's row and its look fit in here, if nothing holds them
        return found

    monkeypatch.setattr(removals, "standing_on", standing)
    Asset.objects.filter(pk=photo.pk).delete()  # the removal's own commit
    removal = threading.Thread(target=curation._unlink, args=({(photo.sha256, photo.mime)},))
    removal.start()
    assert checked.wait(5)
    result = Asset.objects.create_stored(saved, file_name="result.png", origin=Origin.GENERATED)
    held = asyncio.run(archive.held(result))
    go.set()
    removal.join(5)

    assert not removal.is_alive()
    assert not (held and not path.exists()), (
        "the look said the original was held, and the removal took it right after: "
        "the PATCH would release bytes the archive no longer has"
    )
    assert held is False, "the look should have waited for the removal, and seen it gone"


def test_a_set_naming_a_photo_being_removed_holds_it_or_is_refused(subject, monkeypatch):
    """Found by a review: the set's check that its photos exist came before its transaction,
    so a removal committed in between made the set's write fail (a 500, IntegrityError)."""
    photo = subject.assets.get()
    draft = engine.create_set(name="Family", asset_ids=[])
    real_atomic = transaction.atomic

    def removed_first(*args, **kwargs):  # the removal commits as the set's transaction starts
        if Asset.objects.filter(pk=photo.pk).exists():
            curation.remove_photo(photo=photo, subject=subject)
        return real_atomic(*args, **kwargs)

    monkeypatch.setattr(sets, "transaction", SimpleNamespace(atomic=removed_first))
    with pytest.raises(InvalidRequest, match=rf"^Unknown asset: {photo.pk}\.$"):
        engine.choose_assets(avatar_set=draft, asset_ids=[photo.pk])

    draft.refresh_from_db()
    assert not Asset.objects.filter(pk=photo.pk).exists(), "the removal was to go through"
    assert list(draft.items.all()) == [], "the set holds a photo that is gone"
