"""The top navigation marks the part of the studio a page is in (aria-current), once."""

import re

import pytest
from django.test import Client

from studio import engine
from tests.factories import a_batch, stored_asset

pytestmark = pytest.mark.django_db


def marked(client: Client, url: str) -> list[str]:
    """Return the labels of the top navigation's links marked current on the page at `url`."""
    body = client.get(url).content.decode()
    nav = re.search(r'<nav aria-label="Studio">(.*?)</nav>', body, re.S)
    assert nav, f"{url} has no studio navigation"
    return re.findall(r'<a [^>]*aria-current="page"[^>]*>([^<]+)</a>', nav.group(1))


def test_each_page_marks_its_own_part_of_the_studio(signed_in: Client, subject):
    batch = a_batch(subject)
    family = engine.create_set(name="Family", asset_ids=[stored_asset(1).pk])

    pages = {
        "/": ["Batches"],
        f"/batches/{batch.pk}/": ["Batches"],
        "/batches/new/": ["New batch"],
        "/subjects/": ["Subjects"],
        f"/subjects/{subject.pk}/": ["Subjects"],
        "/gallery/": ["Gallery"],
        "/sets/": ["Sets"],
        f"/sets/{family.pk}/": ["Sets"],
        f"/assets/{subject.assets.get().pk}/": [],  # reached from many pages: none is marked
    }

    assert {url: marked(signed_in, url) for url in pages} == pages
