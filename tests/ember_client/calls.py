"""Call the Ember client as the worker does, and what it sends, for the client's tests."""

from typing import Any

from asgiref.sync import async_to_sync

from studio.ember.client import EmberClient
from tests.factories import ember_result

JOBS = "/api/v1/api-generators/jobs"
SYNC_DOOR = "/api/v1/api-generators/generate"
TASK_ID = "6f1c2d3e-4b5a-4c7d-8e9f-0a1b2c3d4e5f"

PAYLOAD: dict[str, Any] = {
    "kind": "image",
    "provider": "openai",
    "model": None,
    "prompt": "a friendly portrait, watercolour",
    "frame": "image",
    "references": [],
    "source_metadata": {
        "source_app": "cwkAvatars",
        "purpose": "exploration",
        "batch_id": "0b9a8c7d-6e5f-4a3b-2c1d-0e9f8a7b6c5d",
        "task_id": TASK_ID,
        "attempt": 1,
        "subjects": [1],
        "frame": "image",
        "candidate": 1,
    },
}

RESULT: dict[str, Any] = ember_result()


def ember_error(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


def call(method: str, *args: Any, **kwargs: Any) -> Any:
    """Run one EmberClient call from this sync test, with a fresh client, and close it."""

    async def go() -> Any:
        client = EmberClient()
        try:
            return await getattr(client, method)(*args, **kwargs)
        finally:
            await client.aclose()

    return async_to_sync(go)()
