"""Sets: an ordered choice of assets, and publishing it (docs/design.md §10).

The choice and the publish are both compare-and-swaps on the set's version, each in one
transaction with its check (docs/design.md §6.3).
"""

from collections.abc import Callable
from typing import Any, TypeVar

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from studio import names, originals
from studio.engine.errors import (
    SET_CHANGED,
    SET_EMPTY,
    SET_KEPT_CHANGING,
    SET_PUBLISHED,
    SET_PUBLISHED_NAME,
    InvalidRequest,
    PublishRefused,
)
from studio.engine.validation import echo, existing_ids, id_list, text_or_none
from studio.models import Asset, AvatarSet, Origin, SetItem
from studio.store import Conflict, update

T = TypeVar("T")  # what a write of a draft set (`_while_a_draft`) returns

MAX_NAME = 120  # characters of a set's name (the studio's form says so too)
MAX_ITEMS = 1000  # assets one set may hold
PUBLISH_TRIES = 3  # checks of a set whose choice keeps changing under the publish


def create_set(*, name: str, asset_ids: list[Any]) -> AvatarSet:
    """Create a set holding the given assets in the given order."""
    name = set_name(name)
    with transaction.atomic():
        avatar_set = AvatarSet.objects.create(name=name)
        choose_assets(avatar_set=avatar_set, asset_ids=asset_ids)
    return avatar_set


def set_name(name: str) -> str:
    """Return `name` as a set keeps it, or InvalidRequest: not text, empty or too long."""
    name = names.cleaned(text_or_none(name, "A set's name must be text."))
    if not name:
        raise InvalidRequest("A set needs a name.")
    if len(name) > MAX_NAME:
        raise InvalidRequest(f"A set's name must be at most {MAX_NAME} characters.")
    return name


def rename_set(*, avatar_set: AvatarSet, name: str) -> AvatarSet:
    """Rename a draft set; a published one keeps the name sibling apps read it by."""
    name = set_name(name)
    return _while_a_draft(
        avatar_set,
        SET_PUBLISHED_NAME,
        lambda: update(avatar_set, expected=avatar_set.version, name=name),
    )


def delete_set(*, avatar_set: AvatarSet) -> list[int]:
    """Delete a draft set (its images stay); return the ids of the assets it held.

    A published set is for good: sibling apps read it. The delete claims the set's
    version first, so a publish landing at the same moment either wins or finds it gone.
    """

    def delete() -> list[int]:
        with transaction.atomic():
            update(avatar_set, expected=avatar_set.version)
            held = list(avatar_set.items.values_list("asset_id", flat=True))
            avatar_set.delete()
        return held

    return _while_a_draft(avatar_set, SET_PUBLISHED_NAME, delete)


def _while_a_draft(avatar_set: AvatarSet, refusal: str, write: Callable[[], T]) -> T:
    """Run `write` (a versioned write of the set) while the set is a draft, again each time
    a change or a publish landed first; refuse with `refusal` once it is published."""
    while True:
        if avatar_set.published_at is not None:
            raise InvalidRequest(refusal)
        try:
            return write()
        except Conflict:  # nothing was written: look at the set as it is now
            avatar_set.refresh_from_db(fields=["version", "published_at"])


def choose_assets(*, avatar_set: AvatarSet, asset_ids: list[Any]) -> AvatarSet:
    """Replace the set's choice with `asset_ids`, in that order, while the set is a draft."""
    ids = id_list(asset_ids, "Assets", most=MAX_ITEMS)
    _check_assets(ids)  # a clear refusal before any write, as a person reads it
    change_choice(avatar_set=avatar_set, change=lambda _chosen: ids)
    return avatar_set


def change_choice(
    *, avatar_set: AvatarSet, change: Callable[[list[int]], list[Any]]
) -> tuple[list[int], list[int]]:
    """Apply `change` to the set's choice as it stands when written; return (before, after).

    `change` maps the chosen asset ids, in order, to the new choice. It is applied to the
    choice read after this write has claimed the set's version, never to one read earlier:
    two people changing one set at once each change what the other left (a review's two
    tabs adding photos lost nine of thirty, and a removed one came back). A publish or
    another change that lands first moves the version, and the change is applied again.
    """

    def write() -> tuple[list[int], list[int]]:
        with transaction.atomic():
            # Claim the version first: another change's or a publish's own versioned
            # write cannot land until this transaction ends, and then finds it moved.
            read = avatar_set.version
            update(avatar_set, expected=avatar_set.version)
            before = list(avatar_set.items.values_list("asset_id", flat=True))
            ids = id_list(change(before), "Assets", most=MAX_ITEMS)
            if ids == before:  # the version stays: an open publish page need not ask
                transaction.set_rollback(True)
                avatar_set.version = read
                return before, ids
            # With the rows locked: a photo's removal (which locks its row first) may
            # have committed since the change was asked for; once locked, none can.
            _check_assets(ids, lock=True)
            avatar_set.items.all().delete()
            SetItem.objects.bulk_create(
                SetItem(avatar_set=avatar_set, asset_id=asset_id, position=position)
                for position, asset_id in enumerate(ids)
            )
        return before, ids

    return _while_a_draft(avatar_set, SET_PUBLISHED, write)


def _check_assets(ids: list[Any], *, lock: bool = False) -> None:
    """Refuse the first of `ids` that names no asset; with `lock`, lock those that do."""
    found_ids = Asset.objects.filter(pk__in=existing_ids(ids)).order_by("pk")
    if lock:
        found_ids = found_ids.select_for_update()
    found = set(found_ids.values_list("pk", flat=True))
    missing = [i for i in ids if i not in found]
    if missing:
        raise InvalidRequest(f"Unknown asset: {echo(missing[0])}.")


def blocking(avatar_set: AvatarSet) -> QuerySet[SetItem]:
    """Return the set's items that keep it from being published, in order (§10).

    Generated images Ember has recorded no history for yet: the publish refuses on
    them, and the studio's set and publish pages name them, by this one rule.
    """
    return avatar_set.items.filter(asset__origin=Origin.GENERATED, asset__ember_history_id="")


def publish(*, avatar_set: AvatarSet, seen_version: int | None = None) -> AvatarSet:
    """Publish a set, refusing while it holds nothing or a chosen generated image lacks its
    Ember history.

    The check and the write are about one version of the set: the write is versioned,
    so a choice that changes in between makes this publish look again, never publish
    unchecked. Publishing again keeps the first publication time. `seen_version`: the
    version a person was shown and confirmed; a set changed since (another tab, a page
    from the history) is refused, not published as it is now.
    """
    if avatar_set.published_at is None:
        _check_whole(avatar_set)  # before the transaction: hashing holds no write lock
    for _ in range(PUBLISH_TRIES):
        if avatar_set.published_at is not None:
            return avatar_set
        if seen_version is not None and avatar_set.version != seen_version:
            raise PublishRefused(SET_CHANGED)
        with transaction.atomic():
            # Sibling apps would read a published set with no image in it.
            if not avatar_set.items.exists():
                raise PublishRefused(SET_EMPTY)
            if blocking(avatar_set).exists():
                raise PublishRefused()
            _check_originals(avatar_set)
            try:
                return update(avatar_set, expected=avatar_set.version, published_at=timezone.now())
            except Conflict:
                pass  # nothing was written; the choice moved since it was read
        avatar_set.refresh_from_db(fields=["version", "published_at"])
    raise PublishRefused(SET_KEPT_CHANGING)


def _check_originals(avatar_set: AvatarSet) -> None:
    """Refuse to publish while a chosen image's original is not in the store.

    Sibling apps fetch each image by the URL the published set gives: one whose file was
    removed by hand, or never put back after a restore, would answer them 503 (a review).
    """
    missing = lost_originals(avatar_set)
    if missing:
        verb = "is" if len(missing) == 1 else "are"
        raise PublishRefused(
            "Publishing waits until every chosen image's original is in the store: "
            f"{images_at(missing).lower()} of the set {verb} missing (an operator puts "
            "originals back with manage.py check_originals --repair)."
        )


def _check_whole(avatar_set: AvatarSet) -> None:
    """Refuse to publish while a chosen image's original fails its checksum.

    Sibling apps would be handed a URL that answers 503 `checksum_failed` (a review
    appended a byte to one and published it). Each is hashed again here, once a publish:
    a set is a handful of images, and a publish happens once. A missing one is said by
    `_check_originals`.
    """
    chosen = avatar_set.items.values_list("asset__sha256", "asset__mime")
    damaged = [
        position
        for position, (sha256, mime) in enumerate(chosen, start=1)
        if _damaged(sha256, mime)
    ]
    if damaged:
        fail = "fails its checksum" if len(damaged) == 1 else "fail their checksums"
        raise PublishRefused(
            "Publishing waits until every chosen image's original is whole: "
            f"{images_at(damaged).lower()} of the set {fail} (an operator puts "
            "originals back with manage.py check_originals --repair)."
        )


def _damaged(sha256: str, mime: str) -> bool:
    """Say whether the original held under its name fails its checksum (`originals.read`,
    the archive's checked read); False when none is held: `lost_originals` says so."""
    if not originals.holds(sha256, mime):
        return False
    try:
        originals.read(sha256, mime)
    except originals.ChecksumFailed:
        return True
    except OSError:  # gone since it was looked at: a missing one, said by the next check
        return False
    return False


def images_at(places: list[int]) -> str:
    """Name chosen images by their places in a set: "Image 2", "Images 2, 3 and 5"."""
    if len(places) == 1:
        return f"Image {places[0]}"
    return f"Images {', '.join(str(n) for n in places[:-1])} and {places[-1]}"


def lost_originals(avatar_set: AvatarSet) -> list[int]:
    """Return the places (from 1) of the chosen images whose original is not in the store.

    A look at each file (`originals.holds`), not a re-hash: a damaged one is
    `check_originals`' to find. The publish refuses on these, and the set's pages name
    them, by this one rule.
    """
    chosen = avatar_set.items.values_list("asset__sha256", "asset__mime")
    return [
        position
        for position, (sha256, mime) in enumerate(chosen, start=1)
        if not originals.holds(sha256, mime)
    ]


def reference_photos(avatar_set: AvatarSet) -> list[int]:
    """Return the places (from 1) of the chosen images that are uploaded reference photos:
    real photos of the family, which a publish hands to sibling apps as readily as avatars
    (its page says so first: a review published one from the gallery unawares)."""
    chosen = avatar_set.items.values_list("asset__origin", flat=True)
    return [
        position for position, origin in enumerate(chosen, start=1) if origin == Origin.UPLOADED
    ]
