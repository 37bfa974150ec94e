"""The Ember client tests' watch on every call, mocked at the HTTP boundary with respx."""

from collections.abc import Iterator

import pytest
import respx

from tests.ember_client.calls import SYNC_DOOR


@pytest.fixture(autouse=True)
def sync_door(ember: respx.Router) -> Iterator[respx.Route]:
    """Watch the synchronous door (never to be called) and the token on every call."""
    route = ember.post(SYNC_DOOR).respond(201, json={"id": "img_sync"})
    yield route
    assert not route.called, "the client called Ember's synchronous /generate door"
    for sent in ember.calls:
        assert sent.request.headers["Authorization"] == "Bearer test-token"
