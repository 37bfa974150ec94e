"""Two changes to one set at once: each is applied to what the other left, none is lost."""

from collections.abc import Callable

import pytest
from django.contrib.auth.models import User
from django.db import transaction
from django.test import Client

from studio import engine
from studio.engine import sets
from studio.models import AvatarSet
from tests.factories import stored_asset
from tests.studio_pages import messages_of

pytestmark = pytest.mark.django_db


def chosen_order(avatar_set: AvatarSet) -> list[int]:
    return list(avatar_set.items.order_by("position").values_list("asset_id", flat=True))


@pytest.fixture
def meanwhile(monkeypatch) -> Callable[[Callable[[], object]], None]:
    """Run a change once, as the next write to a set begins: another tab's, committed
    after this request read the set and before its own transaction."""

    def arrange(other: Callable[[], object]) -> None:
        pending = [other]

        class Transactions:
            @staticmethod
            def atomic(*args, **kwargs):
                if pending:
                    pending.pop()()
                return transaction.atomic(*args, **kwargs)

        monkeypatch.setattr(sets, "transaction", Transactions)

    return arrange


@pytest.fixture
def other_tab(person: User) -> Client:
    other = Client()
    other.force_login(person)
    return other


def test_an_image_added_from_another_tab_is_kept_when_this_one_adds(
    signed_in: Client, other_tab: Client, meanwhile
):
    a, b, c = (stored_asset(seed) for seed in (1, 2, 3))
    family = engine.create_set(name="Family", asset_ids=[a.pk])
    meanwhile(lambda: other_tab.post(f"/assets/{c.pk}/add-to-set/", {"set": family.pk}))

    signed_in.post(f"/assets/{b.pk}/add-to-set/", {"set": family.pk})

    assert chosen_order(family) == [a.pk, c.pk, b.pk], "one of two adds at once was lost"
    assert "Added to Family." in messages_of(signed_in.get(f"/sets/{family.pk}/"))


def test_an_image_removed_from_another_tab_stays_out_when_this_one_moves_another(
    signed_in: Client, other_tab: Client, meanwhile
):
    a, b, c = (stored_asset(seed) for seed in (1, 2, 3))
    family = engine.create_set(name="Family", asset_ids=[a.pk, b.pk, c.pk])
    meanwhile(lambda: other_tab.post(f"/sets/{family.pk}/", {"action": "remove", "asset": b.pk}))

    signed_in.post(f"/sets/{family.pk}/", {"action": "down", "asset": a.pk})

    assert chosen_order(family) == [c.pk, a.pk], "a removed image came back into the set"


def test_images_ticked_in_two_tabs_at_once_all_join_the_set(
    signed_in: Client, other_tab: Client, meanwhile
):
    a, b, c, d = (stored_asset(seed) for seed in (1, 2, 3, 4))
    family = engine.create_set(name="Family", asset_ids=[a.pk])
    meanwhile(lambda: other_tab.post(f"/sets/{family.pk}/", {"action": "add", "assets": [c.pk]}))

    response = signed_in.post(
        f"/sets/{family.pk}/", {"action": "add", "assets": [b.pk, d.pk]}, follow=True
    )

    assert chosen_order(family) == [a.pk, c.pk, b.pk, d.pk]
    assert "Added 2 images to Family." in messages_of(response)


def test_a_change_racing_a_publish_is_refused_not_applied(signed_in: Client, meanwhile):
    a, b = stored_asset(1), stored_asset(2)
    family = engine.create_set(name="Family", asset_ids=[a.pk])
    meanwhile(lambda: engine.publish(avatar_set=AvatarSet.objects.get(pk=family.pk)))

    response = signed_in.post(
        f"/sets/{family.pk}/", {"action": "add", "assets": [b.pk]}, follow=True
    )

    assert chosen_order(family) == [a.pk]
    assert "This set is published; its choice can no longer change." in messages_of(response)
