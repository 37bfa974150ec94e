"""Subjects: each gets a slug of its own, found in a few queries however common its name."""

import re

import pytest

from studio import engine
from studio.engine import library
from studio.models import Subject

pytestmark = pytest.mark.django_db

# One look at the taken slugs, then the insert inside its savepoint (SAVEPOINT, INSERT, RELEASE).
CREATE_QUERIES = 4


def existing(*slugs: str, name: str = "Ada") -> None:
    Subject.objects.bulk_create(Subject(name=name, slug=slug) for slug in slugs)


def test_it_gives_a_name_taken_5000_times_a_new_slug_in_a_few_queries(
    django_assert_max_num_queries,
):
    existing("ada", *(f"ada-{n}" for n in range(2, 5001)))

    with django_assert_max_num_queries(CREATE_QUERIES):
        created = engine.create_subject(name="Ada")

    assert created.slug == "ada-5001"
    assert Subject.objects.filter(slug=created.slug).count() == 1
    assert Subject.objects.count() == 5001


def test_it_uses_the_bare_slug_while_it_is_free(django_assert_max_num_queries):
    existing("ada-2", "ada-3")

    with django_assert_max_num_queries(CREATE_QUERIES):
        created = engine.create_subject(name="Ada")

    assert created.slug == "ada"


def test_it_numbers_past_the_highest_suffix_ignoring_slugs_that_only_look_alike():
    # "ada-lovelace" and "ada-1st" are other names; "ada-007" is a name too ("Ada 007").
    existing("ada", "ada-7", "ada-lovelace", "ada-1st", "ada-007", "adam-9", "ada-2-3")

    created = engine.create_subject(name="Ada")

    assert created.slug == "ada-8"


def test_it_starts_numbering_at_2(db):
    first, second = engine.create_subject(name="Ada"), engine.create_subject(name="Ada")

    assert (first.slug, second.slug) == ("ada", "ada-2")


def a_rival_taking(times: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Let a second writer take the slug `create_subject` found, the first `times` times."""
    free_slug = library._free_slug
    races = iter(range(times))

    def rival_wins_the_race(base: str) -> str:
        slug = free_slug(base)
        if next(races, None) is not None:
            Subject.objects.create(name="Ada (the other request)", slug=slug)
        return slug

    monkeypatch.setattr(library, "_free_slug", rival_wins_the_race)


def test_it_takes_the_next_slug_when_a_second_writer_takes_the_one_it_found(monkeypatch):
    existing("ada")
    a_rival_taking(1, monkeypatch)

    created = engine.create_subject(name="Ada")

    assert (created.name, created.slug) == ("Ada", "ada-3")  # the rival holds "ada-2"
    assert sorted(Subject.objects.values_list("slug", flat=True)) == ["ada", "ada-2", "ada-3"]


def test_it_falls_back_to_a_random_suffix_when_it_keeps_losing_races(monkeypatch):
    existing("ada")
    a_rival_taking(100, monkeypatch)

    created = engine.create_subject(name="Ada")

    assert created.name == "Ada"
    assert re.fullmatch(r"ada-[0-9a-f]{8}", created.slug)
    slugs = list(Subject.objects.values_list("slug", flat=True))
    assert len(slugs) == len(set(slugs))
