"""URL routes for Avatars: the studio pages, the JSON API, the admin, sign-in."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

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
