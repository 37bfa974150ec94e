"""respx's mocks for the Ember client, placed at its transport (studio/ember/transport.py).

The client hands its requests straight to the transport, not through httpx's client, so
respx's own mocks (at httpx's client, or at httpcore's pools) never see them: this one
patches `Transport.handle_async_request`, as respx patches httpcore's pools.
"""

from typing import Any

import httpx
from respx.mocks import AbstractRequestMocker


class TransportMocker(AbstractRequestMocker):
    """Answer the Ember client's requests from respx's routers (`respx.mock(using=USING)`)."""

    name = "ember-transport"
    targets = ["studio.ember.transport.Transport"]
    target_methods = ["handle_async_request"]

    @classmethod
    def to_httpx_request(cls, **kwargs: Any) -> httpx.Request:
        return kwargs["request"]

    @classmethod
    async def from_async_httpx_response(
        cls, httpx_response: httpx.Response, target: Any, **kwargs: Any
    ) -> httpx.Response:
        return httpx_response


USING = TransportMocker.name
