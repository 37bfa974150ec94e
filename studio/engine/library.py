"""Subjects and their reference photos."""

import logging
import re
import secrets
from dataclasses import dataclass

from django.db import DatabaseError, IntegrityError, transaction
from django.db.models import BigIntegerField, Count, Max, Q
from django.db.models.functions import Cast, Substr
from django.utils.text import slugify

from studio import dbfaults, jpeg, metadata, names, originals
from studio.engine.errors import InvalidRequest, StorageRefused
from studio.engine.validation import text_or_none
from studio.models import Asset, Origin, Subject, stored_facts

log = logging.getLogger(__name__)

# What a disk says when it will not take a write: full, over quota, read-only.
SUBJECT_NAME_MAX = 120  # characters
SLUG_TRIES = 3  # numbered slugs tried before a random suffix; a concurrent create costs one


def subject_name(value: object) -> str:
    """Return `value` as a subject's name, or InvalidRequest: not text, empty or too long."""
    name = names.cleaned(text_or_none(value, "A subject's name must be text."))
    if not name:
        raise InvalidRequest("A subject needs a name.")
    if len(name) > SUBJECT_NAME_MAX:
        raise InvalidRequest(f"A subject's name must be at most {SUBJECT_NAME_MAX} characters.")
    return name


def create_subject(*, name: str) -> Subject:
    """Create a subject with a unique slug derived from `name`."""
    name = subject_name(name)
    base = slugify(name)[:120] or "subject"
    for _ in range(SLUG_TRIES):
        subject = _create_subject_as(name=name, slug=_free_slug(base))
        if subject is not None:
            return subject
    # Concurrent requests keep taking the next number: a random suffix no other one computes.
    return Subject.objects.create(name=name, slug=f"{base}-{secrets.token_hex(4)}")


def _free_slug(base: str) -> str:
    """Return `base` if no subject has it, else `base-N` past the highest N taken, in one query.

    The range on `slug` lets its unique index find the `base-<digit>…` rows rather than
    probing one slug per query; the pattern then drops other names that merely start
    with a digit ("ada-1st"). Suffixes of ten digits or more (or with a leading zero)
    are other names, and keep the cast within any database's integer.
    """
    numbered = Q(
        slug__gte=f"{base}-1",
        slug__lt=f"{base}-:",  # ":" follows "9" in ASCII
        slug__regex=rf"^{re.escape(base)}-[1-9][0-9]{{0,8}}$",
    )
    suffix = Cast(Substr("slug", len(base) + 2), BigIntegerField())
    taken = Subject.objects.filter(Q(slug=base) | numbered).aggregate(
        bare=Count("pk", filter=Q(slug=base)), highest=Max(suffix, filter=~Q(slug=base))
    )
    if not taken["bare"]:
        return base
    return f"{base}-{(taken['highest'] or 1) + 1}"


def _create_subject_as(*, name: str, slug: str) -> Subject | None:
    """Create the subject under `slug`, or return None if another request just took it."""
    try:
        with transaction.atomic():  # a savepoint: a lost race leaves the outer transaction usable
            return Subject.objects.create(name=name, slug=slug)
    except IntegrityError:
        return None


@dataclass(frozen=True)
class Upload:
    """A stored reference photo, and whether its bytes were already a known photo."""

    asset: Asset
    known: bool  # the same bytes were already uploaded (for this subject or another)


def add_reference(*, subject: Subject, data: bytes, file_name: str) -> Asset:
    """Store an uploaded reference photo for `subject` (raises originals.NotAnImage)."""
    return upload_reference(subject=subject, data=data, file_name=file_name).asset


def upload_reference(*, subject: Subject, data: bytes, file_name: str) -> Upload:
    """Store an uploaded reference photo for `subject`, saying whether it was already known.

    The same photo uploaded twice is one reference: the existing upload, under the name
    it already has (a photo's name is shared by every subject that has it), gains the
    subject. Bytes that only a generated asset has so far become a new reference row
    (sharing the file); the generated row is left as it is.
    """
    # Location data never reaches the store, the studio's pages or Ember (lossless).
    # Checked cheaply first: stripping walks the file's structure, and a file built of
    # millions of tiny JPEG segments would cost seconds before the store refused it.
    try:
        stored = metadata.strip_location(originals.precheck(data))
    except jpeg.BadJpeg as exc:  # a further picture of a multi-picture JPEG, walked there
        raise originals.NotAnImage(str(exc)) from None
    try:
        return _stored_reference(subject, data, stored, file_name)
    except OSError as exc:
        if exc.errno not in originals.DISK_REFUSED:
            raise
        raise StorageRefused(exc.strerror or str(exc)) from exc
    except DatabaseError as exc:
        # The database's disk full, read-only or failing, by its code (a locked database is
        # no refusing disk): the row is not written (its original, if stored, is a file no
        # row names, which check_originals reports and a later upload takes again).
        if not dbfaults.disk_refused(exc):
            raise
        raise StorageRefused(" ".join(str(exc).split()), StorageRefused.DATABASE) from exc


def _stored_reference(subject: Subject, data: bytes, stored: bytes, file_name: str) -> Upload:
    """Store `stored` (the upload `data` without its location) and its row for `subject`."""
    # Bytes the strip passed on as they were need not be checked again (~12 ms of 12 MB).
    original = originals.save(stored, checked=stored is data)
    with transaction.atomic():
        # The bytes may be a photo being removed right now (its row gone, its file next):
        # once this row is committed, the file is looked at again (`originals.keep`).
        transaction.on_commit(lambda: _keep(stored, original))
        asset, created = Asset.objects.get_or_create(
            sha256=original.sha256,
            origin=Origin.UPLOADED,
            defaults={
                **stored_facts(original),
                "file_name": names.file_name(file_name) or f"reference{original.info.extension}",
                "label": subject.name,
            },
        )
        asset.subjects.add(subject)
    return Upload(asset=asset, known=not created)


def _keep(data: bytes, original: originals.Original) -> None:
    if originals.keep(data, original):
        log.warning("original %s was removed while uploaded again: stored again", original.sha256)
