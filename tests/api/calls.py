"""Call the JSON API as a script does and read its answers, for the API's tests."""

import json
from functools import partial
from typing import Any

from django.contrib.auth.models import Permission, User
from django.test import Client

from tests import factories
from tests.factories import png_bytes

API = "/api/v1"


# Generated images as the API shows them: with a provider, model and Ember image id.
generated_asset = partial(
    factories.generated_asset, provider="openai", model="gpt-image-1", ember_image_id="img_1"
)


def bearing(token: str) -> Client:
    """A client that sends `token` on every request, as a script would."""
    return Client(headers={"Authorization": f"Bearer {token}"})


def allowed_to_change_tasks(user: User) -> User:
    """Grant `user` what the admin's repair actions need: the `studio.change_task` permission."""
    user.user_permissions.add(
        Permission.objects.get_by_natural_key("change_task", "studio", "task")
    )
    return user


def post_json(client: Client, url: str, body: object) -> Any:
    return client.post(url, json.dumps(body), content_type="application/json")


def error(response: Any) -> dict[str, str]:
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message"}
    return body["error"]


def jpeg_bytes() -> bytes:
    return png_bytes(3, fmt="JPEG")
