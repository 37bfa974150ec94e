"""The plumbing every API view shares: token auth, methods, JSON bodies, errors (docs/api.md)."""

import functools
import json
from collections.abc import Callable
from typing import Any, TypeVar

from django.core.exceptions import RequestDataTooBig, ValidationError
from django.db.models import AutoField, Model, QuerySet
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from studio import engine, originals
from studio.api.auth import authenticate
from studio.ids import row_id
from studio.store import Conflict

M = TypeVar("M", bound=Model)
View = Callable[..., HttpResponse]

UNAUTHORIZED = "A valid API token is required."
READ_ONLY = "This API token may only read; ask for a token without --read-only to change anything."
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
    return JsonResponse({"error": {"code": code, "message": message}}, status=status)


def endpoint(*methods: str) -> Callable[[View], View]:
    """Make `view` an API endpoint answering `methods` to requests bearing a valid token.

    The token is checked before anything else, so a caller without one learns
    nothing, not even which methods a route takes. The views are exempt from
    CSRF because they ignore cookies: a browser cannot lend them its session.
    """

    def decorate(view: View) -> View:
        @csrf_exempt
        @functools.wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            token = authenticate(request)
            if token is None:
                response: HttpResponse = error_response(401, "unauthorized", UNAUTHORIZED)
                response["WWW-Authenticate"] = 'Bearer realm="api"'
                return response
            request.user = token.user
            if request.method not in methods:
                response = error_response(
                    405, "method_not_allowed", f"This route takes {' or '.join(methods)}."
                )
                response["Allow"] = ", ".join(methods)
                return response
            # Every route but a GET changes something; the view never runs for such a token.
            if request.method != "GET" and not token.may_write:
                return error_response(403, "read_only", READ_ONLY)
            try:
                return view(request, *args, **kwargs)
            except ApiError as exc:
                return error_response(exc.status, exc.code, exc.message)
            except REFUSED as exc:
                return _refusal(exc)

        return wrapper

    return decorate


def _refusal(exc: Exception) -> JsonResponse:
    status, code, message = next((s, c, m) for r, s, c, m in REFUSALS if isinstance(exc, r))
    return error_response(status, code, message or str(exc))


def read_json(request: HttpRequest) -> dict[str, Any]:
    """Return the request's JSON object, or raise ApiError saying what is wrong with it."""
    try:
        body = json.loads(request.body)
    except RequestDataTooBig:
        raise ApiError(413, "too_large", "The request body is too large.") from None
    # RecursionError: a body nested thousands deep is not a request, whatever it parses to.
    except (ValueError, RecursionError):
        raise ApiError(400, "invalid_json", "The request body is not valid JSON.") from None
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_request", "The request body must be a JSON object.")
    return body


def find(queryset: QuerySet[M], pk: str) -> M:
    """Return the row with primary key `pk`, or raise a 404 ApiError (also for a malformed id)."""
    try:
        if isinstance(queryset.model._meta.pk, AutoField) and row_id(pk) is None:
            raise ValueError(pk)  # " 1", "²" or a number past the column: no row has it
        row = queryset.filter(pk=pk).first()
    # A malformed UUID, a non-number, or a number beyond the column's range names no row.
    except (ValueError, ValidationError, OverflowError):
        row = None
    if row is None:
        name = queryset.model._meta.verbose_name
        raise ApiError(404, "not_found", f"No {name} with id {pk!r}.")
    return row
