"""JSON API routes (API.md)."""

from django.urls import URLPattern

urlpatterns: list[URLPattern] = []
