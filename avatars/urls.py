"""URL routes for Avatars: the studio pages, the JSON API, the admin, sign-in."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("api/v1/", include("studio.api.urls")),
    path("", include("studio.web.urls")),
]
