"""The JSON API tests' clients: a script's, and an operator's allowed to change tasks."""

import pytest
from django.contrib.auth.models import User
from django.test import Client

from studio.api.auth import issue_token
from tests.api.calls import allowed_to_change_tasks, bearing


@pytest.fixture
def api() -> Client:
    """A script's client, acting as a plain (non-staff) user."""
    return bearing(issue_token(user=User.objects.create_user("family-script")))


@pytest.fixture
def staff_api() -> Client:
    """A client acting as a member of staff allowed to change tasks, as an operator is."""
    ops = allowed_to_change_tasks(User.objects.create_user("ops", is_staff=True))
    return bearing(issue_token(user=ops))
