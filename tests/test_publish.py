"""Publishing a set (docs/design.md §9): never while a generated image lacks its history."""

from typing import Any

import pytest

from studio import engine, originals
from studio.engine import PublishRefused
from studio.engine import sets as set_services
from studio.models import AvatarSet, Origin
from studio.store import update
from tests.factories import a_set, kept_image

pytestmark = pytest.mark.django_db

PUBLISH_REFUSED = "Ember history must be recovered before publishing generated images."


# --- publish ------------------------------------------------------------------


def test_it_refuses_to_publish_a_generated_image_without_its_ember_history(subject):
    chosen = a_set(
        kept_image(history_id="hist_1"),
        kept_image(history_id=""),
    )

    with pytest.raises(PublishRefused) as refused:
        engine.publish(avatar_set=chosen)

    assert str(refused.value) == PUBLISH_REFUSED
    assert AvatarSet.objects.get(pk=chosen.pk).published_at is None


def test_it_publishes_a_set_whose_generated_images_all_have_history(subject):
    chosen = a_set(kept_image(history_id="hist_1"), kept_image(history_id="hist_2"))

    published = engine.publish(avatar_set=chosen)

    assert published.published_at is not None
    assert AvatarSet.objects.get(pk=chosen.pk).published_at == published.published_at


def test_it_refuses_to_publish_a_set_whose_original_is_not_in_the_store(subject):
    """Found by a review: a set whose original was removed by hand was published, and
    sibling apps were handed a URL that answers 503."""
    present, gone = kept_image(history_id="hist_1"), kept_image(history_id="hist_2")
    originals.path_of(gone.sha256, gone.mime).unlink()
    chosen = a_set(present, gone)

    with pytest.raises(PublishRefused) as refused:
        engine.publish(avatar_set=chosen)

    assert str(refused.value) == (
        "Publishing waits until every chosen image's original is in the store: image 2 of "
        "the set is missing (an operator puts originals back with manage.py check_originals "
        "--repair)."
    )
    assert AvatarSet.objects.get(pk=chosen.pk).published_at is None


@pytest.mark.parametrize(
    ("damage", "figure"),
    [(lambda data: data + b"x", "a byte appended"), (lambda data: data[:-1], "a byte cut")],
)
def test_it_refuses_to_publish_a_set_whose_original_fails_its_checksum(subject, damage, figure):
    """Found by a review over uvicorn: with a byte appended to an original, its URL answered
    503 `checksum_failed`, and the set holding it was published all the same."""
    whole, hurt, other = (kept_image(history_id=f"hist_{n}") for n in (1, 2, 3))
    for image in (hurt, other):
        path = originals.path_of(image.sha256, image.mime)
        path.write_bytes(damage(path.read_bytes()))
    chosen = a_set(whole, hurt, other)

    with pytest.raises(PublishRefused) as refused:
        engine.publish(avatar_set=chosen)

    assert str(refused.value) == (
        "Publishing waits until every chosen image's original is whole: images 2 and 3 of "
        "the set fail their checksums (an operator puts originals back with manage.py "
        "check_originals --repair)."
    ), figure
    assert AvatarSet.objects.get(pk=chosen.pk).published_at is None


def test_it_keeps_the_first_publication_time_when_published_again(subject):
    chosen = engine.publish(avatar_set=a_set(kept_image(history_id="hist_1")))
    first = chosen.published_at

    again = engine.publish(avatar_set=AvatarSet.objects.get(pk=chosen.pk))

    assert again.published_at == first


def test_it_refuses_to_change_a_published_sets_choice(subject):
    chosen = engine.publish(avatar_set=a_set(kept_image(history_id="hist_1")))
    sneaky = kept_image(history_id="")  # would have been refused by the guard

    with pytest.raises(engine.InvalidRequest, match="This set is published"):
        engine.choose_assets(avatar_set=chosen, asset_ids=[sneaky.pk])

    assert list(chosen.items.values_list("asset__ember_history_id", flat=True)) == ["hist_1"]


def test_it_never_lets_uploaded_photos_block_publishing(subject):
    uploaded = subject.assets.get(origin=Origin.UPLOADED)
    assert uploaded.ember_history_id == ""
    chosen = a_set(uploaded, kept_image(history_id="hist_1"))

    engine.publish(avatar_set=chosen)

    assert AvatarSet.objects.get(pk=chosen.pk).published_at is not None


def test_it_publishes_once_the_missing_history_is_recovered(subject):
    missing = kept_image(history_id="")
    chosen = a_set(missing)
    with pytest.raises(PublishRefused):
        engine.publish(avatar_set=chosen)

    update(missing, ember_history_id="hist_9")
    engine.publish(avatar_set=chosen)

    assert AvatarSet.objects.get(pk=chosen.pk).published_at is not None


def interleave(monkeypatch, name: str, other_writer, *, times: int = 1) -> None:
    """Run `other_writer`, committed, just before the set service's next `times` calls of `name`."""
    real = getattr(set_services, name)
    left = [times]

    def first_the_other_writer(*args: Any, **kwargs: Any) -> Any:
        if left[0] > 0:
            still, left[0] = left[0] - 1, 0  # the other writer's own calls go straight through
            other_writer()
            left[0] = still
        return real(*args, **kwargs)

    monkeypatch.setattr(set_services, name, first_the_other_writer)


def test_it_refuses_to_publish_an_unrecovered_image_chosen_after_its_check(subject, monkeypatch):
    kept = kept_image(history_id="hist_1")
    unrecovered = kept_image(history_id="")
    chosen = a_set(kept)
    # Another request changes the choice between publish's check and its write.
    interleave(
        monkeypatch,
        "update",
        lambda: engine.choose_assets(
            avatar_set=AvatarSet.objects.get(pk=chosen.pk), asset_ids=[kept.pk, unrecovered.pk]
        ),
    )

    with pytest.raises(PublishRefused) as refused:
        engine.publish(avatar_set=AvatarSet.objects.get(pk=chosen.pk))

    row = AvatarSet.objects.get(pk=chosen.pk)
    assert str(refused.value) == PUBLISH_REFUSED
    assert row.published_at is None
    assert list(row.items.values_list("asset", flat=True)) == [kept.pk, unrecovered.pk]


def test_it_publishes_the_newer_choice_only_after_checking_it(subject, monkeypatch):
    first, second = kept_image(history_id="hist_1"), kept_image(history_id="hist_2")
    chosen = a_set(first)
    interleave(
        monkeypatch,
        "update",
        lambda: engine.choose_assets(
            avatar_set=AvatarSet.objects.get(pk=chosen.pk), asset_ids=[second.pk]
        ),
    )

    published = engine.publish(avatar_set=AvatarSet.objects.get(pk=chosen.pk))

    row = AvatarSet.objects.get(pk=chosen.pk)
    assert row.published_at is not None
    assert (published.version, published.published_at) == (row.version, row.published_at)
    assert list(row.items.values_list("asset", flat=True)) == [second.pk]


def test_it_gives_up_publishing_a_set_whose_choice_keeps_changing(subject, monkeypatch):
    first, second = kept_image(history_id="hist_1"), kept_image(history_id="hist_2")
    chosen = a_set(first)
    orders = iter([[second.pk, first.pk], [first.pk, second.pk]] * 2)
    interleave(
        monkeypatch,
        "update",
        lambda: engine.choose_assets(
            avatar_set=AvatarSet.objects.get(pk=chosen.pk), asset_ids=next(orders)
        ),
        times=engine.PUBLISH_TRIES,
    )

    with pytest.raises(PublishRefused) as refused:
        engine.publish(avatar_set=AvatarSet.objects.get(pk=chosen.pk))

    assert str(refused.value) == (
        "This set kept changing while it was being published; publish it again."
    )
    assert AvatarSet.objects.get(pk=chosen.pk).published_at is None


def test_it_refuses_to_change_a_set_published_while_the_choice_was_checked(subject, monkeypatch):
    kept = kept_image(history_id="hist_1")
    sneaky = kept_image(history_id="")
    chosen = a_set(kept)
    draft = AvatarSet.objects.get(pk=chosen.pk)  # read while still a draft
    # Another request publishes the set while this choice is being checked.
    interleave(
        monkeypatch,
        "existing_ids",
        lambda: engine.publish(avatar_set=AvatarSet.objects.get(pk=chosen.pk)),
    )

    with pytest.raises(engine.InvalidRequest) as refused:
        engine.choose_assets(avatar_set=draft, asset_ids=[sneaky.pk])

    row = AvatarSet.objects.get(pk=chosen.pk)
    assert str(refused.value) == "This set is published; its choice can no longer change."
    assert row.published_at is not None
    assert list(row.items.values_list("asset", flat=True)) == [kept.pk]


def test_it_refuses_to_publish_a_set_that_holds_nothing(subject):
    # The set page offers no Publish for it; its publish page and the API did publish it,
    # and sibling apps read a published set with no image.
    empty = engine.create_set(name="Nobody yet", asset_ids=[])

    with pytest.raises(PublishRefused) as refused:
        engine.publish(avatar_set=empty)

    assert str(refused.value) == "Publishing waits until the set holds at least one image."
    assert AvatarSet.objects.get(pk=empty.pk).published_at is None
