"""Which part of the studio a page belongs to, for the top navigation's aria-current."""

from typing import Any

from django import template
from django.utils.safestring import SafeString, mark_safe

register = template.Library()

# The studio's routes by the navigation link that leads to them (an image is reached from
# the batch or the gallery alike, so it belongs to neither).
SECTIONS = {
    "home": "batches",
    "batch": "batches",
    "batch-new": "new",
    "subjects": "subjects",
    "subject": "subjects",
    "gallery": "gallery",
    "sets": "sets",
    "set": "sets",
    "set-delete": "sets",
    "set-publish": "sets",
    "set-published": "sets",
}


@register.simple_tag(takes_context=True)
def current(context: dict[str, Any], section: str) -> SafeString:
    """Return ' aria-current="page"' on the link of the section the page is in, else ''."""
    request = context.get("request")
    match = getattr(request, "resolver_match", None)
    name = getattr(match, "url_name", None)
    return mark_safe(' aria-current="page"' if SECTIONS.get(name or "") == section else "")
