"""How django-ninja is made to keep the API's contract (docs/api.md).

Ninja answers a method a route does not take before it authenticates, in plain text, and
states its own errors (422 with a list) in its own shape. The API promises otherwise: the
token is checked before anything else, so a caller without one learns nothing, not even
which methods a route takes; every answer is `{"error": {"code", "message"}}`. So each
route's view is wrapped in `token_first`, and every exception is stated by a handler here.
"""

import functools
from collections.abc import Callable, Collection
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.http.multipartparser import MultiPartParserError
from django.urls import Resolver404, resolve
from django.views.decorators.csrf import csrf_exempt
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError
from ninja.errors import ValidationError as NinjaValidationError
from ninja.parser import Parser
from ninja.security import HttpBearer

from studio import uploads
from studio.api import auth, bodies
from studio.api.http import (
    READ_ONLY,
    REFUSED,
    UNAUTHORIZED,
    ApiError,
    error_response,
    refusal,
)
from studio.models import ApiToken

View = Callable[..., HttpResponse]
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")  # the order in which `Allow` names them
BAD_UPLOAD = "The upload is not a valid multipart form."
# Django reads at most 1,024 bytes of a part's headers; a long file name is what fills them.
TOO_MANY_FILES = "The upload has more than one file: send one photo at a time, as `file`."
TOO_MANY_FIELDS = "The upload has more than {limit:,} fields: send one photo, as `file`."
LONG_PART_HEADERS = (
    "The upload's part headers are longer than 1,024 bytes: shorten the file name "
    "(names are kept to 255 characters)."
)


class BearerToken(HttpBearer):
    """`Authorization: Bearer <token>`; a read-only token may only GET."""

    def authenticate(self, request: HttpRequest, token: str) -> ApiToken | None:
        # `token_first` has already found the token (and noted its use); look it up again
        # only for a request that came another way.
        row: ApiToken | None = getattr(request, "api_token", None) or auth.authenticate(request)
        if row is None:
            return None
        # Every route but a GET changes something; the view never runs for such a token.
        if request.method != "GET" and not row.may_write:
            raise ApiError(403, "read_only", READ_ONLY)
        return row


class JsonObject(Parser):
    """Read a body as a JSON object, saying what is wrong with one that is not (bodies.py)."""

    def parse_body(self, request: HttpRequest) -> dict[str, Any]:
        return bodies.read_object(request)


def token_first(view: View, *, methods: Collection[str] = ()) -> View:
    """Wrap a route's view so that a request without a valid token gets 401 before anything.

    The views ignore cookies, so they are exempt from CSRF: a browser cannot lend them its
    session. A method the route does not take answers 405 in JSON, with `Allow`. The
    wrapped view names the route's `methods` (none: the API has no such route), so that
    the ASGI door can answer as the route would without reading a body (`methods_taken`).
    """

    @csrf_exempt
    @functools.wraps(view)
    def guarded(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        token = auth.authenticate(request)
        if token is None:
            return unauthorized()
        request.user = token.user
        request.api_token = token  # type: ignore[attr-defined]
        try:
            request.GET  # noqa: B018 - Django counts the query's fields when it is first read
        except TooManyFieldsSent:  # on every route, not only those that read the query
            return too_long_a_query()
        if request.method == "HEAD" and "GET" in methods:
            return head_as_get(view, request, *args, **kwargs)
        response = view(request, *args, **kwargs)
        if isinstance(response, HttpResponseNotAllowed):
            return method_not_allowed(response["Allow"].split(", "))
        return response

    guarded.methods = frozenset(methods)  # type: ignore[attr-defined]
    return guarded


def head_as_get(view: View, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
    """Answer a HEAD as `view` answers a GET, without the body (RFC 9110 §9.3.2).

    Ninja routes each method to its own operation and knows no HEAD; the GET is asked
    instead, so the status and headers (its length among them) are the GET's own.
    """
    request.method = "GET"
    try:
        response = view(request, *args, **kwargs)
    finally:
        request.method = "HEAD"
    if response.streaming:  # an original, streamed: its length is among its headers
        headless = HttpResponse(status=response.status_code)
        for header, value in response.items():
            headless[header] = value
        response.close()
        return headless
    response["Content-Length"] = str(len(response.content))
    response.content = b""
    return response


def methods_taken(path: str) -> frozenset[str]:
    """Return the methods the API route at `path` takes (none for a path it does not have).

    HEAD is taken wherever GET is (`head_as_get`).
    """
    try:
        match = resolve(path)
    except Resolver404:
        return frozenset()
    methods = frozenset(getattr(match.func, "methods", ()))
    return methods | {"HEAD"} if "GET" in methods else methods


def unauthorized() -> HttpResponse:
    response = error_response(401, "unauthorized", UNAUTHORIZED)
    response["WWW-Authenticate"] = 'Bearer realm="api"'
    return response


def method_not_allowed(methods: list[str]) -> HttpResponse:
    allowed = [m for m in METHODS if m in methods]
    response = error_response(
        405, "method_not_allowed", f"This route takes {' or '.join(allowed)}."
    )
    response["Allow"] = ", ".join(allowed)
    return response


def state_errors(api: NinjaAPI) -> None:
    """Make `api` state every error it answers as `{"error": {"code", "message"}}`."""
    api.add_exception_handler(ApiError, lambda request, exc: _api_error(exc))
    for refused in REFUSED:
        api.add_exception_handler(refused, _refused)
    api.add_exception_handler(NinjaValidationError, _invalid)
    api.add_exception_handler(HttpError, _http_error)
    api.add_exception_handler(AuthenticationError, lambda request, exc: unauthorized())
    api.add_exception_handler(
        RequestDataTooBig,
        lambda request, exc: error_response(413, "too_large", uploads.fields_too_large()),
    )
    for bad_form in (MultiPartParserError, TooManyFieldsSent, TooManyFilesSent):
        api.add_exception_handler(bad_form, _bad_upload)
    api.add_exception_handler(Http404, lambda request, exc: not_found())


def not_found() -> HttpResponse:
    return error_response(404, "not_found", "The API has no such route.")


# Ninja types a handler's exception loosely (the class or an instance): these take Any.
def _api_error(exc: Any) -> HttpResponse:
    return error_response(exc.status, exc.code, exc.message)


def _bad_upload(request: HttpRequest, exc: Any) -> HttpResponse:
    """Refuse a body that is not one readable multipart form, saying why when Django says.

    Django counts a query string's fields too: past the limit there, the query is at fault.
    """
    if isinstance(exc, TooManyFieldsSent) and request.method in ("GET", "HEAD"):
        return too_long_a_query()
    if isinstance(exc, TooManyFilesSent):
        return error_response(400, "invalid_upload", TOO_MANY_FILES)
    if isinstance(exc, TooManyFieldsSent):
        limit = settings.DATA_UPLOAD_MAX_NUMBER_FIELDS
        return error_response(400, "invalid_upload", TOO_MANY_FIELDS.format(limit=limit))
    long_headers = uploads.LONG_HEADERS in str(exc)
    return error_response(400, "invalid_upload", LONG_PART_HEADERS if long_headers else BAD_UPLOAD)


def too_long_a_query() -> HttpResponse:
    limit = settings.DATA_UPLOAD_MAX_NUMBER_FIELDS
    return error_response(
        400, "invalid_request", f"The query has more than {limit} fields; send fewer."
    )


def _refused(request: HttpRequest, exc: Any) -> HttpResponse:
    return refusal(exc)


def _invalid(request: HttpRequest, exc: Any) -> HttpResponse:
    """State a request ninja could not read; the engine judges what it can read."""
    for error in exc.errors:
        if error.get("type") == "missing" and tuple(error.get("loc", ()))[:1] == ("body",):
            return error_response(400, "invalid_json", bodies.NOT_JSON)
    first = exc.errors[0] if exc.errors else {}
    where = ".".join(str(part) for part in first.get("loc", ()))
    message = f"{where}: {first.get('msg', 'invalid')}" if where else "The request is invalid."
    return error_response(400, "invalid_request", message)


def _http_error(request: HttpRequest, exc: Any) -> HttpResponse:
    # Ninja wraps what its parser raised (here: JsonObject's ApiError) in an HttpError.
    if isinstance(exc.__cause__, ApiError):
        return _api_error(exc.__cause__)
    code = "not_found" if exc.status_code == 404 else "invalid_request"
    return error_response(exc.status_code, code, str(exc))
