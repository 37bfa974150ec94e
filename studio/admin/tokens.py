"""API tokens: who holds one and its scope; deleting a token revokes it."""

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from studio.admin.base import RecordAdmin
from studio.models import ApiToken


@admin.register(ApiToken)
class ApiTokenAdmin(RecordAdmin):
    list_display = ("user", "prefix", "scope", "created_at", "last_used_at")
    fields = ("user", "prefix", "scope", "created_at", "last_used_at")
    list_select_related = ("user",)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return True  # deleting a token revokes it

    @admin.display(description="digest")
    def prefix(self, token: ApiToken) -> str:
        return f"{token.digest[:8]}…"
