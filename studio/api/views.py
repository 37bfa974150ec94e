"""The JSON API of docs/api.md: thin views that read the request, call a service and answer.

Ids are taken as text and looked up by `find`, so that a malformed id is a JSON 404 like
any unknown one. The shapes are in `studio.api.schemas`; the document made from them is
served at `/api/v1/openapi.json`.
"""

from typing import Any

from django.contrib.admin.views.decorators import staff_member_required
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse, HttpResponseBase, HttpResponseNotModified
from django.urls import reverse
from ninja import File, NinjaAPI, Status, UploadedFile

from studio import engine, originals, sending, uploads
from studio.api import paging
from studio.api.door import BearerToken, JsonObject, state_errors
from studio.api.http import ApiError, find
from studio.api.schemas import (
    AssetOut,
    BatchIn,
    BatchOut,
    CancelReport,
    ErrorOut,
    SetIn,
    SetOut,
    SubjectIn,
    SubjectOut,
    SubjectPage,
    TaskOut,
)
from studio.api.serializers import asset_json, batch_json, set_json, subject_json, task_json
from studio.ember.errors import EmberError
from studio.engine.lost_sends import reconcilable
from studio.engine.recovery import history_unread
from studio.models import Asset, AvatarSet, Batch, BatchKey, Subject, Task
from studio.store import Conflict

# A year: an original never changes under its URL (it is named by its hash).
ORIGINAL_CACHE_CONTROL = "private, max-age=31536000, immutable"
RECONCILE_FORBIDDEN = (
    "Reconciling a task needs the permission to change tasks (studio.change_task)."
)
NOT_RECONCILABLE = (
    "This task is {state}: only uncertain, history_missing and copy_failed tasks are "
    "reconciled, and done ones with an earlier send not looked for. Ember was not asked."
)
IMAGE_TYPES = ("image/png", "image/jpeg", "image/webp", "image/gif")


class Api(NinjaAPI):
    """The API, whose document says the photo's field is required.

    The view takes `file` as optional so that it can say why when it is missing (its
    400s above); ninja then documented it as optional and nullable (a review).
    """

    def get_openapi_schema(self, *args: Any, **kwargs: Any) -> Any:
        schema = super().get_openapi_schema(*args, **kwargs)
        for path, methods in schema["paths"].items():
            if path.endswith("/subjects/{subject_id}/references"):
                form = methods["post"]["requestBody"]["content"]["multipart/form-data"]
                form["schema"]["properties"]["file"] = {"type": "string", "format": "binary"}
                form["schema"]["required"] = ["file"]
        return schema


api = Api(
    title="Avatars",
    version="1",
    description="The JSON API of the avatar studio (docs/api.md).",
    urls_namespace="api",
    auth=BearerToken(),
    parser=JsonObject(),
    openapi_url="/openapi.json",
    docs_url="/docs",
    docs_decorator=staff_member_required,
)
state_errors(api)


# What any route may answer before its view runs (docs/api.md): a query of too many
# fields or a foreign host (400), no token (401), a method it does not take (405), a body
# too slow (408) or too large (413).
ANY_ROUTE = (400, 401, 405, 408, 413)


def errors(*statuses: int) -> dict[int, type[ErrorOut]]:
    """Document `statuses`, and those every route may answer (ANY_ROUTE), as errors."""
    return {status: ErrorOut for status in sorted({*ANY_ROUTE, *statuses})}


READ = errors(404)
WRITE = errors(403, 404, 409)


@api.get("/subjects", response={200: SubjectPage, **errors(400)}, url_name="subjects")
def list_subjects(request: HttpRequest, cursor: str | None = None) -> dict[str, Any]:
    """List the subjects by name, a page at a time."""
    listed, next_url = paging.page(request, Subject.objects.all(), key="name")
    return {"items": [subject_json(s) for s in listed], "next": next_url}


@api.post(
    "/subjects", response={201: SubjectOut, **errors(400, 403, 413, 415)}, url_name="subjects"
)
def create_subject(request: HttpRequest, body: SubjectIn) -> Status:
    """Create a subject from `{"name"}`."""
    return Status(201, subject_json(engine.create_subject(name=body.fields().get("name", ""))))


# Django's parser leaves out a part whose file name is none once cleaned ("." or ".."),
# so a part sent as `file` may be missing too (a review's).
SEND_FILE = "Send the photo as the multipart field `file`, under a file name (such as photo.jpg)."
# A part named `file` without a file name is a form's text field, not a file (a review's).
NO_FILE = (
    "The multipart field `file` has no file name, so it is text, not a file: send the photo "
    'as a file (its part\'s Content-Disposition names a filename="…").'
)


@api.post(
    "/subjects/{subject_id}/references",
    response={201: AssetOut, **errors(403, 404, 411, 503)},  # 411: sent in chunks
    url_name="references",
)
def references(
    request: HttpRequest, subject_id: str, file: UploadedFile | None = File(None)
) -> Status:
    """Store the uploaded photo (multipart field `file`) as a reference of the subject."""
    subject = find(Subject.objects.all(), subject_id)
    if file is None:
        if uploads.dropped_for_size(request):
            raise ApiError(400, "too_large", originals.too_large())
        raise ApiError(400, "invalid_upload", NO_FILE if "file" in request.POST else SEND_FILE)
    data = uploads.take(file)
    asset = engine.add_reference(subject=subject, data=data, file_name=file.name or "")
    return Status(201, asset_json(asset))


@api.post(
    "/batches",
    response={202: BatchOut, **errors(400, 403, 413, 415, 422, 429)},
    url_name="batches",
    # The key is read by `_idempotency_key`, which states the API's own refusals.
    openapi_extra={
        "parameters": [
            {
                "name": "Idempotency-Key",
                "in": "header",
                "required": False,
                "description": "The same key within 24 hours answers with the first batch.",
                "schema": {"type": "string", "minLength": 1, "maxLength": BatchKey.MAX_LENGTH},
            }
        ],
        "responses": {
            202: {"headers": {"Location": {"schema": {"type": "string"}, "required": True}}}
        },
    },
)
def batches(request: HttpRequest, response: HttpResponse, body: BatchIn) -> Status:
    """Plan a batch; the worker sends it to Ember later, hence 202 Accepted.

    A retry under the same `Idempotency-Key` answers with the batch planned first.
    """
    key = _idempotency_key(request)
    batch = engine.generate(request=body.fields(), user=_user(request), key=key)
    response["Location"] = reverse("api:batch", args=[batch.pk])
    return Status(202, batch_json(batch))


@api.get("/batches/{batch_id}", response={200: BatchOut, **READ}, url_name="batch")
def batch(request: HttpRequest, batch_id: str) -> dict[str, Any]:
    """Show a batch with its tasks and progress."""
    return batch_json(find(Batch.objects.all(), batch_id))


@api.post(
    "/batches/{batch_id}/cancel", response={200: CancelReport, **WRITE}, url_name="batch-cancel"
)
def batch_cancel(request: HttpRequest, batch_id: str) -> dict[str, Any]:
    """Cancel what can still be cancelled in a batch, and report the rest: the tasks kept
    going with Ember, and those that had ended before (every task is in one of the three)."""
    report = engine.cancel_batch(batch=find(Batch.objects.all(), batch_id))
    return {
        "cancelled": [str(task.pk) for task in report.cancelled],
        "kept": [str(task.pk) for task in report.kept],
        "ended": [str(task.pk) for task in report.ended],
    }


@api.get("/tasks/{task_id}", response={200: TaskOut, **READ}, url_name="task")
def task(request: HttpRequest, task_id: str) -> dict[str, Any]:
    """Show a task."""
    return task_json(find(Task.objects.all(), task_id))


@api.post("/tasks/{task_id}/cancel", response={200: TaskOut, **WRITE}, url_name="task-cancel")
def task_cancel(request: HttpRequest, task_id: str) -> dict[str, Any]:
    """Cancel a task that has sent nothing to Ember (409 once it has)."""
    return task_json(engine.cancel_task(task=find(Task.objects.all(), task_id)))


@api.post(
    "/tasks/{task_id}/reconcile",
    response={200: TaskOut, **errors(403, 404, 409, 503)},
    url_name="task-reconcile",
)
def task_reconcile(request: HttpRequest, task_id: str) -> dict[str, Any]:
    """Ask Ember's history about a task that needs care (`studio.change_task`, as in the admin).

    Staff status is not required: it only opens the admin site, which the API is not.
    """
    if not _user(request).has_perm("studio.change_task"):
        raise ApiError(403, "forbidden", RECONCILE_FORBIDDEN)
    task = find(Task.objects.all(), task_id)
    # Said, not a 200 with the task as it was (a review's).
    if not reconcilable(task):
        raise ApiError(409, "not_reconcilable", NOT_RECONCILABLE.format(state=task.state))
    try:
        return task_json(engine.reconcile(task=task))
    except EmberError as exc:  # nothing learned: the task is as it was
        raise ApiError(503, "ember_unavailable", history_unread(exc)) from None
    except Conflict:
        # Another reconcile, the worker or a person moved it while Ember was asked: the task
        # as it now is, as a cancel answers (a review's 409 was retried into "not
        # reconcilable" once the winner had sent the task on).
        return task_json(find(Task.objects.all(), task_id))


@api.get("/assets/{asset_id}", response={200: AssetOut, **READ}, url_name="asset")
def asset(request: HttpRequest, asset_id: str) -> dict[str, Any]:
    """Show an asset."""
    return asset_json(find(Asset.objects.all(), asset_id))


@api.get(
    "/assets/{asset_id}/original",
    response=errors(404, 503),
    url_name="asset-original",
    openapi_extra={
        "responses": {
            200: {
                "description": "The original bytes, as uploaded or received from Ember.",
                "content": {
                    mime: {"schema": {"type": "string", "format": "binary"}} for mime in IMAGE_TYPES
                },
            },
            304: {"description": "Not modified: If-None-Match names this original's ETag."},
        }
    },
)
def asset_original(request: HttpRequest, asset_id: str) -> HttpResponseBase:
    """Send an asset's original bytes, checked against their hash (503 if they fail).

    A client that already holds them (its If-None-Match names this ETag) gets 304, as
    the studio's pages answer, without the file being read.
    """
    found = find(Asset.objects.all(), asset_id)
    etag = f'"{found.sha256}"'
    if sending.holds_version(request, etag):
        not_modified = HttpResponseNotModified()
        not_modified["ETag"] = etag
        not_modified["Cache-Control"] = ORIGINAL_CACHE_CONTROL
        return not_modified
    try:
        response: HttpResponseBase = sending.original_response(found.sha256, found.mime)
    except FileNotFoundError:
        raise ApiError(503, "original_missing", "The stored original is missing.") from None
    # The mime was decided by decoding the file: a browser must not guess another.
    response["X-Content-Type-Options"] = "nosniff"
    response["Cache-Control"] = ORIGINAL_CACHE_CONTROL
    response["ETag"] = etag
    return response


@api.post("/sets", response={201: SetOut, **errors(400, 403, 413, 415)}, url_name="sets")
def sets(request: HttpRequest, body: SetIn) -> Status:
    """Create a set from `{"name", "assets": [ids]}`, in that order."""
    fields = body.fields()
    # Unchecked here: the service says what is wrong with a missing or malformed list.
    asset_ids: Any = fields.get("assets")
    avatar_set = engine.create_set(name=fields.get("name", ""), asset_ids=asset_ids)
    return Status(201, set_json(avatar_set))


@api.get("/sets/{set_id}", response={200: SetOut, **READ}, url_name="set")
def avatar_set(request: HttpRequest, set_id: str) -> dict[str, Any]:
    """Show a set with its assets in order."""
    return set_json(find(AvatarSet.objects.all(), set_id))


@api.post("/sets/{set_id}/publish", response={200: SetOut, **WRITE}, url_name="set-publish")
def set_publish(request: HttpRequest, set_id: str) -> dict[str, Any]:
    """Publish a set (409 while a chosen generated image lacks its Ember history)."""
    published = engine.publish(avatar_set=find(AvatarSet.objects.all(), set_id))
    return set_json(published)


def _user(request: HttpRequest) -> User:
    # `token_first` put the token's user here; no anonymous request gets this far.
    user = request.user
    assert isinstance(user, User)
    return user


def _idempotency_key(request: HttpRequest) -> str:
    """Return the request's `Idempotency-Key` ("" without one), or refuse an unusable one."""
    key = request.headers.get("Idempotency-Key")
    if key is None:
        return ""
    if not key.strip():
        raise ApiError(400, "invalid_idempotency_key", "The Idempotency-Key must not be empty.")
    if len(key) > BatchKey.MAX_LENGTH:
        raise ApiError(
            400,
            "invalid_idempotency_key",
            f"The Idempotency-Key must be at most {BatchKey.MAX_LENGTH} characters.",
        )
    if not all(" " <= char <= "~" for char in key):  # a control character, or not ASCII
        raise ApiError(
            400,
            "invalid_idempotency_key",
            "The Idempotency-Key must be printable ASCII (a UUID is a good one).",
        )
    return key
