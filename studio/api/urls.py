"""JSON API routes (docs/api.md), under `/api/v1/`: ninja's routes behind `token_first`.

The OpenAPI document answers a valid token or a signed-in member of staff (whose browser
reads it for the docs page); the docs page itself is for signed-in staff only.
"""

from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, URLResolver, path, re_path
from ninja.openapi.views import openapi_json

from studio.api import auth
from studio.api.door import method_not_allowed, not_found, token_first, unauthorized
from studio.api.views import api

app_name = "api"


def _document(request: HttpRequest) -> HttpResponse:
    """Serve the OpenAPI document to a token's bearer or to signed-in staff."""
    if not request.user.is_staff and auth.authenticate(request) is None:
        return unauthorized()
    if request.method != "GET":
        return method_not_allowed(["GET"])
    return openapi_json(request, api=api)


def _routes() -> list[URLPattern | URLResolver]:
    patterns, _app, _namespace = api.urls
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
        elif name == "openapi-view":
            routes.append(pattern)
        else:
            routes.append(path(route, token_first(pattern.callback), name=name))
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
