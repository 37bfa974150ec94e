"""Renaming and removing subjects and their reference photos, never an original still needed.

A reference photo is one asset, shared by every subject it was uploaded for. Taking it
off a subject detaches it from that subject whenever anything else still needs it:
another subject, a task that froze it among its references (the worker sends it to
Ember, and the task's record names it), or a set. Only a photo nothing needs is deleted,
its original and thumbnails with it. Detaching changes no batch: a task's references
are frozen copies (asset id, sha256, name, mime) of the photo as it was planned.

A subject a batch was made of stays: the batch's results name them.
"""

from collections.abc import Iterable
from dataclasses import dataclass, field

from django.db import transaction
from django.db.models import F, Q

from studio import names, originals, removals, thumbs
from studio.engine import InvalidRequest
from studio.engine.library import subject_name
from studio.models import Asset, AvatarSet, Batch, Origin, SetItem, Subject, Task
from studio.store import update

NAMED = 3  # users a sentence names; the rest are counted
CHUNK = 100  # asset ids per narrowing query: SQLite caps an expression's depth at 1,000


class InUse(InvalidRequest):
    """A subject a batch was made of; the message names the batches."""


@dataclass(frozen=True)
class Users:
    """The batches and sets that use something, said for people ("the batch “A” and 2 more")."""

    named: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.named)

    def __str__(self) -> str:
        shown = list(self.named[:NAMED])
        if len(self.named) > NAMED:
            shown.append(f"{len(self.named) - NAMED} more")
        return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " and " + shown[-1]

    @property
    def verb(self) -> str:
        """The verb that agrees with the sentence: one user "uses", several "use"."""
        return "uses" if len(self.named) == 1 else "use"


@dataclass
class PhotoRemoval:
    """What taking `photo` off `subject` does: delete it, or detach it and keep it for others."""

    photo: Asset
    subject: Subject
    others: list[Subject] = field(default_factory=list)  # other subjects that have it
    users: Users = field(default_factory=Users)  # the batches and sets that use it

    @property
    def deletes(self) -> bool:
        return not self.others and not self.users


@dataclass
class SubjectRemoval:
    """What removing `subject` does: the photos deleted and those kept (detached) for others.

    `batches` names the batches made of the subject: while there is one, nothing is removed.
    """

    subject: Subject
    deleted: list[Asset] = field(default_factory=list)
    kept: list[Asset] = field(default_factory=list)
    batches: Users = field(default_factory=Users)

    def refusal(self) -> str:
        name = self.subject.name
        return f"{name} cannot be removed: {self.batches} {self.batches.verb} {name}."


def rename_subject(*, subject: Subject, name: str) -> Subject:
    """Give `subject` a new name (its slug, used in URLs elsewhere, stays)."""
    name = subject_name(name)
    old = subject.name
    with transaction.atomic():
        update(subject, name=name)
        # An upload's label is the subject's name it was uploaded for: keep it in step.
        subject.assets.filter(origin=Origin.UPLOADED, label=old).update(
            label=name, version=F("version") + 1
        )
    return subject


def rename_photo(*, photo: Asset, file_name: str) -> Asset:
    """Give a reference photo a new file name (the name it is downloaded under).

    The name is the photo's, so every subject that has the photo sees the new one; the
    batches that froze it keep the name they were planned with.
    """
    file_name = names.file_name(file_name)
    if not file_name:
        raise InvalidRequest("A photo needs a file name.")
    return update(photo, file_name=file_name)


def plan_photo_removal(*, photo: Asset, subject: Subject) -> PhotoRemoval:
    """Say what `remove_photo` would do now, without changing anything."""
    return PhotoRemoval(
        photo=photo,
        subject=subject,
        others=list(photo.subjects.exclude(pk=subject.pk).order_by("name", "pk")),
        users=_users({photo.pk}),
    )


def remove_photo(*, photo: Asset, subject: Subject) -> PhotoRemoval:
    """Take `photo` off `subject`; delete it (and, after the commit, its file) if nothing needs it.

    The check and the change share one transaction: on SQLite it holds the write lock,
    and elsewhere the photo's row is locked first, as planning locks the photos it
    froze (studio/engine/planning.py), so no batch can freeze the photo between the
    check and the delete.
    """
    with transaction.atomic():
        Asset.objects.select_for_update().filter(pk=photo.pk).first()
        removal = plan_photo_removal(photo=photo, subject=subject)
        if removal.deletes:
            _delete([photo])
        else:
            photo.subjects.remove(subject)
    return removal


def plan_subject_removal(*, subject: Subject) -> SubjectRemoval:
    """Say what `remove_subject` would do now, without changing anything."""
    photos = list(subject.assets.filter(origin=Origin.UPLOADED).order_by("pk"))
    ids = {photo.pk for photo in photos}
    shared = set(
        Asset.subjects.through.objects.filter(asset__in=ids)
        .exclude(subject=subject)
        .values_list("asset_id", flat=True)
    )
    needed = shared | _frozen(ids) | _held(ids)
    batches = Batch.objects.filter(pk__in=_batches_of(subject.pk)).order_by("created_at")
    return SubjectRemoval(
        subject=subject,
        deleted=[photo for photo in photos if photo.pk not in needed],
        kept=[photo for photo in photos if photo.pk in needed],
        batches=Users(tuple(f"the batch “{batch.title}”" for batch in batches)),
    )


def remove_subject(*, subject: Subject) -> SubjectRemoval:
    """Delete `subject` and the photos nothing else needs; the others are only detached.

    Raises InUse while a batch was made of the subject.
    """
    with transaction.atomic():
        # Its photos' rows first, as planning locks the photos it froze (remove_photo).
        list(Asset.objects.select_for_update().filter(subjects=subject).values_list("pk"))
        removal = plan_subject_removal(subject=subject)
        if removal.batches:
            raise InUse(removal.refusal())
        subject.delete()  # detaches every photo, kept or not
        _delete(removal.deleted)
    return removal


def let_go(ids: Iterable[int]) -> list[Asset]:
    """Delete those of the photos `ids` taken off every subject that nothing needs now.

    Such a photo was kept when it was removed only because a set or a batch used it; once
    a set lets go of the last use (a set's change calls this with what it dropped), the
    removal a person asked for is finished. Checked under the rows' locks, as
    `remove_photo` does. Return the photos deleted.
    """
    ids = set(ids)
    if not ids:
        return []
    with transaction.atomic():
        gone = _needless(ids, lock=True)
        _delete(gone)
    return gone


def let_go_by(avatar_set: AvatarSet, photo_ids: Iterable[int]) -> list[Asset]:
    """Return the photos `let_go` would delete were `avatar_set` to let go of `photo_ids`.

    Read to ask first (a review: the set page's Remove deleted such a photo unasked).
    """
    return _needless(set(photo_ids), besides=avatar_set)


def _needless(
    ids: set[int], *, lock: bool = False, besides: AvatarSet | None = None
) -> list[Asset]:
    """Return those of the photos `ids` taken off every subject that no batch froze and no
    set (but `besides`) holds; with `lock`, their rows locked."""
    photos = Asset.objects.filter(pk__in=ids, origin=Origin.UPLOADED, subjects__isnull=True)
    if lock:
        # Only the photos' rows (PostgreSQL locks no row of an outer join's side).
        photos = photos.select_for_update(of=("self",))
    needed = _frozen(ids) | _held(ids, besides=besides)
    return [photo for photo in photos.order_by("pk") if photo.pk not in needed]


def _users(ids: set[int]) -> Users:
    """Name the batches whose tasks froze any of the assets `ids`, then the sets holding them."""
    batch_ids = {batch for batch, _asset in _freezing(ids)}
    batches = Batch.objects.filter(pk__in=batch_ids).order_by("created_at")
    sets = AvatarSet.objects.filter(items__asset__in=ids).distinct().order_by("created_at")
    return Users(
        tuple(f"the batch “{b.title}”" for b in batches)
        + tuple(f"the set “{s.name}”" for s in sets)
    )


def _frozen(ids: set[int]) -> set[int]:
    """Return those of the assets `ids` that some task froze among its references."""
    return {asset for _batch, asset in _freezing(ids)}


def _held(ids: set[int], *, besides: AvatarSet | None = None) -> set[int]:
    """Return those of the assets `ids` that some set (other than `besides`) holds."""
    held = SetItem.objects.filter(asset__in=ids)
    if besides is not None:
        held = held.exclude(avatar_set=besides)
    return set(held.values_list("asset_id", flat=True))


def _freezing(ids: set[int]) -> set[tuple[object, int]]:
    """Return (batch, asset) for every task whose frozen references name an asset in `ids`.

    The JSON text is narrowed first (both spellings of `"asset": N` that databases
    write), then each candidate's list is read, so "asset": 12 never matches 123.
    """
    found: set[tuple[object, int]] = set()
    for chunk in _chunks(sorted(ids)):
        narrow = Q()
        for pk in chunk:
            narrow |= Q(references__icontains=f'"asset": {pk}')
            narrow |= Q(references__icontains=f'"asset":{pk}')
        rows = Task.objects.filter(narrow).values_list("batch_id", "references")
        for batch_id, references in rows:
            for reference in references or []:
                if isinstance(reference, dict) and reference.get("asset") in ids:
                    found.add((batch_id, reference["asset"]))
    return found


def _batches_of(subject_id: int) -> set[object]:
    """Return the batches with a task whose subjects (a JSON list of ids) name `subject_id`.

    Narrowed on the list's text as databases write it ("[1, 2]", "[1,2]"), then read.
    """
    narrow = Q()
    for before in ("[", " ", ","):
        for after in ("]", ","):
            narrow |= Q(subjects__icontains=f"{before}{subject_id}{after}")
    return {
        batch_id
        for batch_id, subjects in Task.objects.filter(narrow).values_list("batch_id", "subjects")
        if subject_id in (subjects or [])
    }


def _chunks(ids: list[int]) -> Iterable[list[int]]:
    for start in range(0, len(ids), CHUNK):
        yield ids[start : start + CHUNK]


def _delete(photos: list[Asset]) -> None:
    """Delete the rows now, and after the commit each file no other asset row shares."""
    if not photos:
        return
    gone = {(photo.sha256, photo.mime) for photo in photos}
    Asset.objects.filter(pk__in=[photo.pk for photo in photos]).delete()
    transaction.on_commit(lambda: _unlink(gone))


def _unlink(files: set[tuple[str, str]]) -> None:
    """Remove each original and its thumbnails unless an asset row (a result, an upload
    made meanwhile) still stands on the same bytes.

    The look for rows and the unlink happen under the originals' naming lock: a save
    that acknowledged the file looks again under it once its row is committed (an
    upload's `originals.keep`, the worker's `originals.holds` before a release), so
    either this look sees that row or that look sees the file gone and puts it back.
    """
    removals.finish_pending()  # what a backup held off, if none runs now
    with originals.naming():
        standing = removals.standing_on({sha256 for sha256, _ in files})
        gone = {(sha256, mime) for sha256, mime in files if sha256 not in standing}
        # Now, or once a running backup has copied them (removals.py).
        removals.unlink(gone)
    for sha256, _mime in gone:  # only a cache, rebuilt from the original when asked for
        thumbs.forget(sha256)
