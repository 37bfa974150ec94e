"""How the admin shows things: links, JSON, previews of originals, Ember's protection."""

import json
from typing import Any

from django.conf import settings
from django.contrib import admin
from django.db.models import Model, QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html

from studio import originals
from studio.models import Asset

PREVIEW_SIZE = (
    256  # pixels, the longer side of an asset's preview on its change page (a thumbs size)
)


def admin_link(obj: Model | None, text: object = None) -> str:
    """Return a link to `obj`'s admin change page (or a dash)."""
    if obj is None:
        return "-"
    meta = obj._meta
    url = reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[obj.pk])
    return format_html('<a href="{}">{}</a>', url, obj if text is None else text)


def provider_label(key: str) -> str:
    """Name a provider as people know it: its label in the catalogue, else its key."""
    entry = settings.AVATARS_PROVIDERS.get(key)
    return entry["label"] if entry else key or "-"


class ProviderFilter(admin.SimpleListFilter):
    """Filter by provider, each named by its label (the catalogue's providers)."""

    title = "provider"
    parameter_name = "provider"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(key, provider_label(key)) for key in settings.AVATARS_PROVIDERS]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.filter(provider=self.value()) if self.value() else queryset


def pretty_json(value: object) -> str:
    """Show JSON the way a person reads it: indented, in a preformatted block."""
    if value in (None, "", [], {}):
        return "-"
    return format_html(
        '<pre class="admin-json">{}</pre>',
        json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False),
    )


def protection_text(released: bool | None) -> str:
    """Say what is known about Ember's protection of its copy (docs/design.md §6.7, step 4)."""
    if released is None:
        return "not tried yet"
    return "released" if released else "unconfirmed (asked; Ember did not confirm)"


def preview(asset: Asset, size: int = PREVIEW_SIZE) -> str:
    """Return an <img> of the original's thumbnail (`size`: one of thumbs.SIZES), or say for
    people why there is none.

    The original is read and checked here, so the page says when it is gone or damaged. The
    picture is the studio's own thumbnail URL: the pages' content policy (img-src 'self')
    refuses an image written into the page as a data: URI, which showed as a broken image.
    """
    try:
        originals.read(asset.sha256, asset.mime)
    except originals.ChecksumFailed:
        return originals.CHECKSUM_FAILED
    except (OSError, ValueError):
        return "The original is not in the store."
    url = reverse("studio:asset-thumb", args=[asset.pk, size])
    return format_html('<img src="{}" alt="{}">', url, str(asset))
