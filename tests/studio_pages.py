"""The studio pages' cast shared by their test files: a person, signed in."""

import pytest
from django.contrib.auth.models import User
from django.test import Client


@pytest.fixture
def person(db: None) -> User:
    return User.objects.create_user("grace", password="not-a-real-password")


@pytest.fixture
def signed_in(client: Client, person: User) -> Client:
    client.force_login(person)
    return client
