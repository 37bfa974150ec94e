"""Renaming and removing subjects and their reference photos, never an original still in use.

A reference photo is in use once a task froze it among its references (the worker sends
it to Ember, and the task's record names it) or a set holds it. Such a photo, and a
subject with such photos, is kept; the refusal names what uses it.
"""

from dataclasses import dataclass, field

from django.db import transaction
from django.db.models import F, Q

from studio import originals, thumbs
from studio.engine import InvalidRequest
from studio.models import Asset, AvatarSet, Batch, Origin, Subject, Task
from studio.store import update

NAMED = 3  # users a refusal names; the rest are counted


class InUse(InvalidRequest):
    """A photo (or a subject's photo) a task or a set uses; the message names them."""


@dataclass
class Removed:
    """What a removal took away: photo rows deleted, and the subjects a shared one kept."""

    photos: list[Asset] = field(default_factory=list)
    kept_by: list[Subject] = field(default_factory=list)


def rename_subject(*, subject: Subject, name: str) -> Subject:
    """Give `subject` a new name (its slug, used in URLs elsewhere, stays)."""
    name = name.strip() if isinstance(name, str) else ""
    if not name:
        raise InvalidRequest("A subject needs a name.")
    if len(name) > 120:
        raise InvalidRequest("A subject's name must be at most 120 characters.")
    old = subject.name
    with transaction.atomic():
        update(subject, name=name)
        # An upload's label is the subject's name it was uploaded for: keep it in step.
        subject.assets.filter(origin=Origin.UPLOADED, label=old).update(
            label=name, version=F("version") + 1
        )
    return subject


def rename_photo(*, photo: Asset, file_name: str) -> Asset:
    """Give a reference photo a new file name (the name it is downloaded under)."""
    file_name = file_name.strip() if isinstance(file_name, str) else ""
    if not file_name:
        raise InvalidRequest("A photo needs a file name.")
    return update(photo, file_name=file_name[:255])


def remove_photo(*, photo: Asset, subject: Subject) -> Removed:
    """Take `photo` off `subject`; delete it (and its file) once no subject has it.

    Raises InUse while a task or a set uses it. The check and the delete share one
    transaction: on SQLite it holds the write lock, so no batch can freeze the photo
    in between; the file goes only after the commit.
    """
    with transaction.atomic():
        users = _users([photo])
        if users:
            raise InUse(f"{photo.file_name} cannot be removed: {users} uses it.")
        others = list(photo.subjects.exclude(pk=subject.pk))
        if others:
            photo.subjects.remove(subject)
            return Removed(kept_by=others)
        _delete([photo])
    return Removed(photos=[photo])


def remove_subject(*, subject: Subject) -> Removed:
    """Delete `subject` and the photos only it has; raise InUse while any is used."""
    with transaction.atomic():
        photos = list(subject.assets.filter(origin=Origin.UPLOADED).order_by("pk"))
        for photo in photos:
            users = _users([photo])
            if users:
                raise InUse(f"{subject.name} cannot be removed: {users} uses {photo.file_name}.")
        shared = set(
            Asset.subjects.through.objects.filter(asset__in=photos)
            .exclude(subject=subject)
            .values_list("asset_id", flat=True)
        )
        only_theirs = [photo for photo in photos if photo.pk not in shared]
        subject.delete()
        _delete(only_theirs)
    return Removed(photos=only_theirs)


def _users(photos: list[Asset]) -> str:
    """Name, for people, the batches whose tasks froze any of `photos` and the sets holding them."""
    ids = {photo.pk for photo in photos}
    if not ids:
        return ""
    batches = Batch.objects.filter(pk__in=_freezing_batches(ids)).order_by("created_at")
    sets = AvatarSet.objects.filter(items__asset__in=ids).distinct().order_by("created_at")
    named = [f"the batch “{b.title}”" for b in batches] + [f"the set “{s.name}”" for s in sets]
    if not named:
        return ""
    shown = named[:NAMED]
    if len(named) > NAMED:
        shown.append(f"{len(named) - NAMED} more")
    return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " and " + shown[-1]


def _freezing_batches(ids: set[int]) -> set[object]:
    """Return the batches with a task whose frozen references name any asset in `ids`.

    The JSON text is narrowed first (both spellings of `"asset": N` that databases
    write), then each candidate's list is read, so "asset": 12 never matches 123.
    """
    narrow = Q()
    for pk in ids:
        narrow |= Q(references__icontains=f'"asset": {pk}') | Q(
            references__icontains=f'"asset":{pk}'
        )
    found: set[object] = set()
    for batch_id, references in Task.objects.filter(narrow).values_list("batch_id", "references"):
        if any(isinstance(r, dict) and r.get("asset") in ids for r in references or []):
            found.add(batch_id)
    return found


def _delete(photos: list[Asset]) -> None:
    """Delete the rows now, and after the commit each file no other asset row shares."""
    if not photos:
        return
    gone = {(photo.sha256, photo.mime) for photo in photos}
    Asset.objects.filter(pk__in=[photo.pk for photo in photos]).delete()
    transaction.on_commit(lambda: _unlink(gone))


def _unlink(files: set[tuple[str, str]]) -> None:
    """Remove each original and its thumbnails unless an asset row (a result, an upload
    made meanwhile) still stands on the same bytes."""
    held = Asset.objects.filter(sha256__in=[sha256 for sha256, _ in files]).values_list("sha256")
    shared = {sha256 for (sha256,) in held}
    for sha256, mime in files:
        if sha256 in shared:
            continue
        originals.path_for(sha256, originals.extension_for(mime)).unlink(missing_ok=True)
        for size in thumbs.SIZES:
            thumbs.path_for(sha256, size).unlink(missing_ok=True)
