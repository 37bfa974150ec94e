"""What every API route shares: its errors, the services' refusals, finding rows (docs/api.md)."""

from typing import TypeVar

from django.core.exceptions import ValidationError
from django.db.models import AutoField, Model, QuerySet, UUIDField
from django.http import JsonResponse
from django.utils.cache import add_never_cache_headers

from studio import engine, originals
from studio.ids import canonical_uuid, row_id
from studio.store import Conflict

M = TypeVar("M", bound=Model)

UNAUTHORIZED = "A valid API token is required."
READ_ONLY = "This API token may only read; ask for a token without --read-only to change anything."
# An error of ours (a 500): the caller learns it happened and was logged, nothing more.
INTERNAL_ERROR = "The server hit an error of its own and could not answer; it has been logged."
# Django refuses a Host header not in ALLOWED_HOSTS before any view runs (avatars/urls.py).
INVALID_HOST = "This server does not answer to the host the request names."
BAD_REQUEST = "The request could not be read."
CONFLICT = "The row changed while this request was served; read it again and retry."
KEY_REUSED = (
    "This Idempotency-Key was already used with a different request body; "
    "send a new key to plan another batch."
)

# How the services' refusals are stated over HTTP: (status, code, message or None
# for the exception's own). Anything else escaping a view is a bug: a 500.
# The first match wins: a subclass comes before its base.
REFUSALS: list[tuple[type[Exception], int, str, str | None]] = [
    (engine.SpendCapReached, 429, "daily_cap_reached", None),
    (engine.InvalidRequest, 400, "invalid_request", None),
    (originals.NotAnImage, 400, "not_an_image", None),
    (engine.KeyReused, 422, "idempotency_key_reused", KEY_REUSED),
    (engine.TooLate, 409, "too_late", None),
    (engine.PublishRefused, 409, "publish_refused", None),
    (Conflict, 409, "conflict", CONFLICT),
    (originals.ChecksumFailed, 503, "checksum_failed", None),
    (engine.StorageRefused, 503, "storage_refused", None),
]
REFUSED = tuple(refused for refused, *_ in REFUSALS)


class ApiError(Exception):
    """A request the API refuses; rendered as `{"error": {"code", "message"}}`."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def error_response(status: int, code: str, message: str) -> JsonResponse:
    """Answer with the API's error shape, never to be cached: a refusal made before the
    token was taken (401, a bad host) passes no middleware that would say so."""
    response = JsonResponse({"error": {"code": code, "message": message}}, status=status)
    add_never_cache_headers(response)
    return response


def refusal(exc: Exception) -> JsonResponse:
    """State one of the services' refusals (an instance of REFUSED) as REFUSALS says."""
    status, code, message = next((s, c, m) for r, s, c, m in REFUSALS if isinstance(exc, r))
    response = error_response(status, code, message or str(exc))
    if isinstance(exc, engine.SpendCapReached) and exc.retry_after is not None:
        response["Retry-After"] = str(exc.retry_after)  # seconds until the batch would fit
    return response


def find(queryset: QuerySet[M], pk: str) -> M:
    """Return the row with primary key `pk`, or raise a 404 ApiError (also for a malformed id)."""
    try:
        if isinstance(queryset.model._meta.pk, AutoField) and row_id(pk) is None:
            raise ValueError(pk)  # " 1", "01", "²" or a number past the column: no row has it
        if isinstance(queryset.model._meta.pk, UUIDField) and not canonical_uuid(pk):
            raise ValueError(pk)  # upper case, braces, "urn:uuid:": no batch or task's name
        row = queryset.filter(pk=pk).first()
    # A malformed UUID, a non-number, or a number beyond the column's range names no row.
    except (ValueError, ValidationError, OverflowError):
        row = None
    if row is None:
        name = queryset.model._meta.verbose_name
        raise ApiError(404, "not_found", f"No {name} with id {engine.echo(pk)}.")
    return row


def storable_text(text: str) -> bool:
    """Say whether a database can store (and compare against) `text`: no NUL, no lone surrogate.

    PostgreSQL refuses NUL in text, and a lone surrogate (which JSON's escapes allow)
    cannot be encoded as UTF-8 by either database: both would be a 500 deep in a query.
    """
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
