"""URL routes for Avatars: the studio pages, the JSON API, the admin, sign-in."""

import sys

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.core.exceptions import DisallowedHost, RequestDataTooBig
from django.http import HttpRequest, HttpResponse
from django.http.multipartparser import MultiPartParserError
from django.template.loader import render_to_string
from django.urls import include, path
from django.views import defaults

from avatars import outage
from studio import dbfaults, uploads
from studio.api.door import not_found
from studio.api.http import BAD_REQUEST, INTERNAL_ERROR, INVALID_HOST, error_response
from studio.web import metrics, signing_in
from studio.web.refusals import form_page


def api_without_its_slash(request: HttpRequest) -> HttpResponse:
    """Answer /api and /api/v1 in the API's shape, not the studio's HTML (a review)."""
    return not_found()


urlpatterns = [
    path("admin/", admin.site.urls),
    # Only signing in and out: accounts are made by an operator, so there are no
    # password-reset or -change pages to attack.
    path(
        "accounts/login/",
        auth_views.LoginView.as_view(authentication_form=signing_in.SignInForm),
        name="login",
    ),
    path("accounts/logout/", signing_in.SignOut.as_view(), name="logout"),
    path("api/v1/", include("studio.api.urls")),
    path("api/v1", api_without_its_slash),
    path("api", api_without_its_slash),
    # For Prometheus: a bearer token, or loopback only (docs/operations.md §Metrics).
    path("metrics", metrics.scrape, name="metrics"),
    path("", include("studio.web.urls")),
]


def server_error(request: HttpRequest) -> HttpResponse:
    """Answer an error of ours (DEBUG off): JSON under the API, the studio's page elsewhere.

    The API's callers read `{"error": {"code", "message"}}`, not a page; either way Django
    has already logged the error with its traceback, and the answer names nothing inside.
    A database out of reach is no error of a page: 503, saying so (`avatars/outage.py`).
    """
    api = request.path.startswith("/api/")
    if dbfaults.unusable(sys.exc_info()[1]):  # Django calls this while handling the error
        return outage.api_answer() if api else outage.page(request)
    if api:
        return error_response(500, "internal_error", INTERNAL_ERROR)
    return defaults.server_error(request)


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    """Answer a request Django refused (DEBUG off): JSON under the API, the studio's page elsewhere.

    Django refuses a `Host` header not in ALLOWED_HOSTS (DisallowedHost) before any view
    runs, so the API's own handlers never see it; its callers still read the error shape.
    """
    if request.path.startswith("/api/"):
        if isinstance(exception, DisallowedHost):
            return error_response(400, "invalid_host", INVALID_HOST)
        return error_response(400, "invalid_request", BAD_REQUEST)
    if isinstance(exception, RequestDataTooBig):
        # A form's fields past their limit inside an upload's body (found by a review: the
        # page named no limit): 413, as the door answers a body too long from its length.
        context = {"message": uploads.fields_too_large(), "back": form_page(request) or "/"}
        return HttpResponse(render_to_string("studio/form_too_large.html", context), status=413)
    if isinstance(exception, MultiPartParserError) and uploads.LONG_HEADERS in str(exception):
        # A photo's file name past what Django reads of a part's headers (a review's 5,000
        # characters was told only that the form could not be read).
        context = {"reason": uploads.LONG_FILE_NAME, "back": form_page(request)}
        return HttpResponse(render_to_string("400.html", context), status=400)
    return defaults.bad_request(request, exception)


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """Answer a path nothing serves (DEBUG off): JSON under /api/ (an /api/v2/ a client
    guessed at, found by a review answered the HTML page), the studio's page elsewhere.
    Paths under /api/v1/ never come here: the API answers its own (after the token)."""
    if request.path == "/api" or request.path.startswith("/api/"):
        return not_found()
    return defaults.page_not_found(request, exception)


handler400 = bad_request
handler404 = page_not_found
handler500 = server_error
