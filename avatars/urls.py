"""URL routes for Avatars: the studio pages, the JSON API, the admin, sign-in."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponse
from django.urls import include, path
from django.views import defaults

from studio.api.http import INTERNAL_ERROR, error_response
from studio.web import metrics

urlpatterns = [
    path("admin/", admin.site.urls),
    # Only signing in and out: accounts are made by an operator, so there are no
    # password-reset or -change pages to attack.
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/v1/", include("studio.api.urls")),
    # For Prometheus: a bearer token, or loopback only (docs/operations.md §Metrics).
    path("metrics", metrics.scrape, name="metrics"),
    path("", include("studio.web.urls")),
]


def server_error(request: HttpRequest) -> HttpResponse:
    """Answer an error of ours (DEBUG off): JSON under the API, the studio's page elsewhere.

    The API's callers read `{"error": {"code", "message"}}`, not a page; either way Django
    has already logged the error with its traceback, and the answer names nothing inside.
    """
    if request.path.startswith("/api/"):
        return error_response(500, "internal_error", INTERNAL_ERROR)
    return defaults.server_error(request)


handler500 = server_error
