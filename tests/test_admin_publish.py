"""The admin's Publish asks first, as the studio does: publishing cannot be undone.

Found by a review: one press of the list's "Publish" published every selected set at once,
where the studio shows what sibling apps will read and asks. The confirmation publishes the
sets as it showed them: one changed since (an image added in the studio) is asked again.
"""

import pytest
from django.db.models import F

from studio import engine
from studio.models import AvatarSet
from tests.admin_pages import row_of, run_action, said, text
from tests.factories import a_set, generated_asset, kept_image

pytestmark = pytest.mark.django_db

PUBLISH_REFUSED = "Ember history must be recovered before publishing generated images."


def confirmed(admin_client, sets: list[AvatarSet], versions: dict[int, int] | None = None):
    """Post the confirmation page's form back, for `sets` at the versions it showed."""
    shown = versions or {s.pk: s.version for s in sets}
    fields = {f"version-{pk}": str(version) for pk, version in shown.items()}
    return run_action(admin_client, AvatarSet, "publish_sets", sets, post="yes", **fields)


def test_it_asks_before_publishing_and_publishes_nothing_until_asked(admin_client):
    ready = a_set(kept_image(history_id="hist_1"), name="Ready")

    page = run_action(admin_client, AvatarSet, "publish_sets", [ready])

    assert row_of(ready).published_at is None, "published before the person confirmed"
    body = text(page)
    assert "Publish 1 set?" in body
    assert "Publishing cannot be undone." in body
    assert "Ready" in body and "1 image" in body
    assert f'name="version-{ready.pk}" value="{ready.version}"' in body
    assert "publish-confirmation confirmation" in body  # its rows one block each on a phone
    assert "\u203a Publish\n</div>" in body  # the trail back to the list


def test_the_confirmation_publishes_and_says_which(admin_client):
    blocked = a_set(generated_asset(history_id=""), name="Blocked")
    ready = a_set(kept_image(history_id="hist_1"), name="Ready")

    response = confirmed(admin_client, [blocked, ready])

    assert row_of(blocked).published_at is None
    assert row_of(ready).published_at is not None
    assert f"Blocked: not published. {PUBLISH_REFUSED}" in said(response)
    assert "Ready: published." in said(response)


def test_a_set_changed_since_the_confirmation_was_shown_is_not_published(admin_client):
    ready = a_set(kept_image(history_id="hist_1"), name="Ready")
    shown = {ready.pk: ready.version}
    AvatarSet.objects.filter(pk=ready.pk).update(version=F("version") + 1)  # another tab's edit

    response = confirmed(admin_client, [ready], shown)

    assert row_of(ready).published_at is None
    [message] = said(response)
    assert message.startswith("Ready: not published. "), message
    assert "changed" in message, message


def test_a_confirmation_without_the_versions_it_showed_publishes_nothing(admin_client):
    ready = a_set(kept_image(history_id="hist_1"), name="Ready")

    response = run_action(admin_client, AvatarSet, "publish_sets", [ready], post="yes")

    assert row_of(ready).published_at is None
    assert [m.split(". ")[0] for m in said(response)] == ["Ready: not published"]


def test_a_set_published_already_is_said_so_and_not_asked_about(admin_client):
    published = a_set(kept_image(history_id="hist_1"), name="Old")
    engine.publish(avatar_set=published)
    before = row_of(published)

    response = run_action(admin_client, AvatarSet, "publish_sets", [published])

    assert said(response) == ["Old: published already; nothing changed."]
    assert "Publishing cannot be undone." not in text(response)
    assert (row_of(published).published_at, row_of(published).version) == (
        before.published_at,
        before.version,
    )


def test_more_sets_than_one_confirmation_takes_are_refused_whole(admin_client, monkeypatch):
    """Found by a review: 499 sets selected made the confirmation's form pass Django's 1,000
    fields, and the Yes a 400."""
    monkeypatch.setattr("studio.admin.sets.PUBLISH_AT_ONCE", 2)
    drafts = [a_set(kept_image(history_id=f"hist_{n}"), name=f"Draft {n}") for n in range(3)]

    response = run_action(admin_client, AvatarSet, "publish_sets", drafts)

    assert said(response) == [
        "3 unpublished sets were selected; publish at most 2 at a time. "
        "Nothing was published: select fewer."
    ]
    assert "Publishing cannot be undone." not in text(response)
    assert all(row_of(d).published_at is None for d in drafts)
