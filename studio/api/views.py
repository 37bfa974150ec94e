"""The JSON API of docs/api.md: thin views that read the request, call a service and answer."""

from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent
from django.core.files.uploadedfile import UploadedFile
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.multipartparser import MultiPartParserError
from django.urls import reverse

from studio import engine, originals, uploads
from studio.api import paging
from studio.api.http import ApiError, endpoint, find, read_json
from studio.api.serializers import asset_json, batch_json, set_json, subject_json, task_json
from studio.models import Asset, AvatarSet, Batch, BatchKey, Subject, Task

# A year: an original never changes under its URL (it is named by its hash).
ORIGINAL_CACHE_CONTROL = "private, max-age=31536000, immutable"
RECONCILE_FORBIDDEN = (
    "Reconciling a task needs the permission to change tasks (studio.change_task)."
)


@endpoint("GET", "POST")
def subjects(request: HttpRequest) -> HttpResponse:
    """List the subjects by name, a page at a time, or create one from `{"name"}`."""
    if request.method == "POST":
        subject = engine.create_subject(name=read_json(request).get("name", ""))
        return JsonResponse(subject_json(subject), status=201)
    listed, next_url = paging.page(request, Subject.objects.all(), key="name")
    return JsonResponse({"items": [subject_json(s) for s in listed], "next": next_url})


@endpoint("POST")
def references(request: HttpRequest, subject_id: str) -> HttpResponse:
    """Store the uploaded photo (multipart field `file`) as a reference of the subject."""
    subject = find(Subject.objects.all(), subject_id)
    upload = _upload(request)
    # One byte past the limit is enough for the originals store to refuse the
    # file as too large, should a file past the cap ever reach it.
    data = upload.read(settings.AVATARS_MAX_IMAGE_BYTES + 1)
    asset = engine.add_reference(subject=subject, data=data, file_name=upload.name or "")
    return JsonResponse(asset_json(asset), status=201)


@endpoint("POST")
def batches(request: HttpRequest) -> HttpResponse:
    """Plan a batch; the worker sends it to Ember later, hence 202 Accepted.

    A retry under the same `Idempotency-Key` answers with the batch planned first.
    """
    key = _idempotency_key(request)
    batch = engine.generate(request=read_json(request), user=_user(request), key=key)
    response = JsonResponse(batch_json(batch), status=202)
    response["Location"] = reverse("api:batch", args=[batch.pk])
    return response


@endpoint("GET")
def batch(request: HttpRequest, batch_id: str) -> HttpResponse:
    """Show a batch with its tasks and progress."""
    return JsonResponse(batch_json(find(Batch.objects.all(), batch_id)))


@endpoint("POST")
def batch_cancel(request: HttpRequest, batch_id: str) -> HttpResponse:
    """Cancel what can still be cancelled in a batch; say which tasks were kept."""
    report = engine.cancel_batch(batch=find(Batch.objects.all(), batch_id))
    return JsonResponse(
        {
            "cancelled": [str(task.pk) for task in report.cancelled],
            "kept": [str(task.pk) for task in report.kept],
        }
    )


@endpoint("GET")
def task(request: HttpRequest, task_id: str) -> HttpResponse:
    """Show a task."""
    return JsonResponse(task_json(find(Task.objects.all(), task_id)))


@endpoint("POST")
def task_cancel(request: HttpRequest, task_id: str) -> HttpResponse:
    """Cancel a task that has sent nothing to Ember (409 once it has)."""
    return JsonResponse(task_json(engine.cancel_task(task=find(Task.objects.all(), task_id))))


@endpoint("POST")
def task_reconcile(request: HttpRequest, task_id: str) -> HttpResponse:
    """Ask Ember's history about a task that needs care (`studio.change_task`, as in the admin).

    Staff status is not required: it only opens the admin site, which the API is not.
    """
    if not _user(request).has_perm("studio.change_task"):
        raise ApiError(403, "forbidden", RECONCILE_FORBIDDEN)
    return JsonResponse(task_json(engine.reconcile(task=find(Task.objects.all(), task_id))))


@endpoint("GET")
def asset(request: HttpRequest, asset_id: str) -> HttpResponse:
    """Show an asset."""
    return JsonResponse(asset_json(find(Asset.objects.all(), asset_id)))


@endpoint("GET")
def asset_original(request: HttpRequest, asset_id: str) -> HttpResponse:
    """Send an asset's original bytes, checked against their hash (503 if they fail)."""
    found = find(Asset.objects.all(), asset_id)
    try:
        data = originals.read(found.sha256, found.mime)
    except FileNotFoundError:
        raise ApiError(503, "original_missing", "The stored original is missing.") from None
    response = HttpResponse(data, content_type=found.mime)
    # The mime was decided by decoding the file: a browser must not guess another.
    response["X-Content-Type-Options"] = "nosniff"
    response["Cache-Control"] = ORIGINAL_CACHE_CONTROL
    response["ETag"] = f'"{found.sha256}"'
    return response


@endpoint("POST")
def sets(request: HttpRequest) -> HttpResponse:
    """Create a set from `{"name", "assets": [ids]}`, in that order."""
    body = read_json(request)
    # Unchecked here: the service says what is wrong with a missing or malformed list.
    asset_ids: Any = body.get("assets")
    avatar_set = engine.create_set(name=body.get("name", ""), asset_ids=asset_ids)
    return JsonResponse(set_json(avatar_set), status=201)


@endpoint("GET")
def avatar_set(request: HttpRequest, set_id: str) -> HttpResponse:
    """Show a set with its assets in order."""
    return JsonResponse(set_json(find(AvatarSet.objects.all(), set_id)))


@endpoint("POST")
def set_publish(request: HttpRequest, set_id: str) -> HttpResponse:
    """Publish a set (409 while a chosen generated image lacks its Ember history)."""
    published = engine.publish(avatar_set=find(AvatarSet.objects.all(), set_id))
    return JsonResponse(set_json(published))


@endpoint("GET", "POST", "PUT", "PATCH", "DELETE")
def not_found(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
    """Answer a path the API does not have (after the token check, like every route)."""
    raise ApiError(404, "not_found", "The API has no such route.")


def _user(request: HttpRequest) -> User:
    # `endpoint` put the token's user here; no anonymous request gets this far.
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
    return key


def _upload(request: HttpRequest) -> UploadedFile:
    try:
        upload = request.FILES.get("file")
    except RequestDataTooBig:
        raise ApiError(413, "too_large", "The request body is too large.") from None
    except (MultiPartParserError, TooManyFieldsSent, TooManyFilesSent):
        raise ApiError(400, "invalid_upload", "The upload is not a valid multipart form.") from None
    if upload is None:
        if uploads.dropped_for_size(request):
            raise ApiError(400, "too_large", originals.too_large())
        raise ApiError(400, "invalid_upload", "Send the photo as the multipart field `file`.")
    return upload
