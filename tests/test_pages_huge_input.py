"""Numbers and names too long for Python or SQLite, typed into the studio by a signed-in
person, or put in a link a family member follows (a GET: any page can make one).

Found by a review over uvicorn: `?page=` with 4,301 digits (int() refuses more than
4,300) was a 500 on every listing, a candidate count of 5,000 digits a 500 on the new-batch
form, and a rename to 50,000 characters (SQLite refuses a LIKE pattern that long) a 500.
"""

import pytest
from django.test import Client

from studio import engine
from studio.models import Batch, Subject
from tests.studio_pages import batch_form, messages_of, text

pytestmark = pytest.mark.django_db

HUGE = "9" * 5_000
LONG = "A" * 50_001


@pytest.mark.parametrize("listing", ["/", "/subjects/", "/gallery/", "/sets/"])
def test_a_page_number_of_thousands_of_digits_shows_the_first_page(signed_in: Client, listing):
    response = signed_in.get(f"{listing}?page={HUGE}")

    assert response.status_code == 200


def test_a_subjects_photos_with_a_page_number_of_thousands_of_digits(signed_in: Client, subject):
    response = signed_in.get(f"/subjects/{subject.pk}/?page={HUGE}")

    assert response.status_code == 200
    assert subject.name in text(response)


def test_a_candidate_count_of_thousands_of_digits_is_refused_beside_its_box(
    signed_in: Client, subject
):
    response = signed_in.post("/batches/new/", batch_form(subject, candidates_openai=HUGE))

    assert response.status_code == 400
    assert "At most " in text(response) and " candidates a provider." in text(response)
    assert not Batch.objects.exists()


def test_renaming_a_subject_to_fifty_thousand_characters_says_the_limit(
    signed_in: Client, make_subject
):
    ada = make_subject("Ada")

    response = signed_in.post(f"/subjects/{ada.pk}/rename/", {"name": LONG})

    assert response.status_code == 400
    assert "A subject's name must be at most 120 characters." in text(response)
    assert Subject.objects.get(pk=ada.pk).name == "Ada"


def test_renaming_a_set_to_fifty_thousand_characters_says_the_limit(signed_in: Client, subject):
    avatar_set = engine.create_set(name="Family", asset_ids=[])

    response = signed_in.post(f"/sets/{avatar_set.pk}/rename/", {"name": LONG}, follow=True)

    assert messages_of(response) == ["A set's name must be at most 120 characters."]
    avatar_set.refresh_from_db()
    assert avatar_set.name == "Family"
