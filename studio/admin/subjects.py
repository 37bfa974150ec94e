"""Subjects: a person may rename one; their reference photos are shown, never edited here."""

from typing import Any

from django.contrib import admin
from django.db.models import Count, Q, QuerySet
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join

from studio.admin.base import VersionedAdmin
from studio.admin.display import admin_link, preview
from studio.models import Origin, Subject

REFERENCE_PREVIEW_SIZE = 128  # pixels, the longer side of each photo on a subject's page


@admin.register(Subject)
class SubjectAdmin(VersionedAdmin):
    list_display = ("name", "slug", "n_references", "created_at")
    search_fields = ("name", "slug")
    editable = ("name",)
    fields = ("name", "slug", "created_at", "version", "reference_photos")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        uploaded = Q(assets__origin=Origin.UPLOADED)
        return super().get_queryset(request).annotate(n_refs=Count("assets", filter=uploaded))

    @admin.display(description="reference photos", ordering="n_refs")
    def n_references(self, subject: Subject) -> int:
        n = getattr(subject, "n_refs", None)
        return subject.assets.filter(origin=Origin.UPLOADED).count() if n is None else n

    @admin.display(description="reference photos")
    def reference_photos(self, subject: Subject) -> str:
        # Shown inline as a read-only table rather than an InlineModelAdmin: the
        # many-to-many row has no name of its own, and nothing here is edited.
        photos = subject.assets.filter(origin=Origin.UPLOADED).order_by("pk")
        rows = [
            (
                preview(photo, REFERENCE_PREVIEW_SIZE),
                admin_link(photo, photo.file_name),
                f"{photo.width} x {photo.height}",
                photo.sha256,
            )
            for photo in photos
        ]
        if not rows:
            return "none yet"
        return format_html(
            "<table><thead><tr><th>photo</th><th>file</th><th>size</th><th>sha256</th>"
            "</tr></thead><tbody>{}</tbody></table>",
            format_html_join("", "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>", rows),
        )
