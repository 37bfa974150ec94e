"""JSON API routes (docs/api.md), under `/api/v1/`: ninja's routes behind `token_first`.

The OpenAPI document answers a valid token or a signed-in member of staff (whose browser
reads it for the docs page); the docs page itself is for signed-in staff only. Both only
read: anything but a GET is answered as every route answers it, 401 then 405.
"""

import functools
from collections import defaultdict

from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, URLResolver, path, re_path
from django.views.decorators.csrf import csrf_exempt
from ninja.openapi.views import openapi_json

from studio.api import auth
from studio.api.door import (
    View,
    head_as_get,
    method_not_allowed,
    not_found,
    token_first,
    unauthorized,
)
from studio.api.views import api

app_name = "api"


def read_only(view: View) -> View:
    """Wrap a view of the document so that a write to it gets the API's 401, then its 405.

    Exempt from CSRF: such a request changes nothing, and without the exemption Django
    would answer it with the studio's page about a form that could not be sent.
    """

    @csrf_exempt
    @functools.wraps(view)
    def guarded(request: HttpRequest, *args: object, **kwargs: object) -> HttpResponse:
        if request.method == "GET":
            return view(request, *args, **kwargs)
        if request.method == "HEAD":
            return head_as_get(view, request, *args, **kwargs)
        if not request.user.is_staff and auth.authenticate(request) is None:
            return unauthorized()
        return method_not_allowed(["GET"])

    guarded.methods = frozenset({"GET"})  # type: ignore[attr-defined]  # as token_first's
    return guarded


@read_only
def _document(request: HttpRequest) -> HttpResponse:
    """Serve the OpenAPI document to a token's bearer or to signed-in staff."""
    if not request.user.is_staff and auth.authenticate(request) is None:
        return unauthorized()
    return openapi_json(request, api=api)


def _methods_by_name() -> dict[str, set[str]]:
    """Return the methods each route takes, by its name (every route names its operations)."""
    taken: dict[str, set[str]] = defaultdict(set)
    for path_view in api.default_router.path_operations.values():
        for operation in path_view.operations:
            taken[operation.url_name or ""].update(operation.methods)
    return taken


def _routes() -> list[URLPattern | URLResolver]:
    patterns, _app, _namespace = api.urls
    taken = _methods_by_name()
    routes: list[URLPattern | URLResolver] = []
    seen: set[str] = set()
    for pattern in patterns:
        assert isinstance(pattern, URLPattern)
        name, route = pattern.name or "", str(pattern.pattern)
        # Ninja adds one pattern per operation; the first of a path serves all its methods.
        if route in seen:
            continue
        seen.add(route)
        if name == "openapi-json":
            routes.append(path(route, _document, name=name))
        elif name == "api-root":  # ninja names the API's prefix by it; nothing is there
            routes.append(path(route, _nothing_here, name=name))
        elif name == "openapi-view":  # the docs page: signed-in staff only (docs_decorator)
            routes.append(path(route, read_only(pattern.callback), name=name))
        else:
            routes.append(
                path(route, token_first(pattern.callback, methods=taken[name]), name=name)
            )
    return routes


@token_first
def _nothing_here(request: HttpRequest, *args: object, **kwargs: object) -> HttpResponse:
    """Answer a path the API does not have (after the token check, like every route)."""
    return not_found()


urlpatterns: list[URLPattern | URLResolver] = [
    *_routes(),
    # Last: any other path under /api/v1/ answers in JSON, not with the HTML 404 page.
    re_path(r"", _nothing_here, name="not-found"),
]
