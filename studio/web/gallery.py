"""The gallery's filters: by kind (results or reference photos), by subject and by batch."""

import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django.db.models import QuerySet
from django.http import QueryDict

from studio.ids import row_id
from studio.models import Asset, Batch, Origin, Subject

BATCH_CHOICES = 30  # the most recent batches offered in the filter (a chosen older one too)


@dataclass
class GalleryFilter:
    """What the gallery shows, read from its query parameters; a value naming nothing is dropped."""

    origin: str = ""
    subject: Subject | None = None
    batch: Batch | None = None

    @classmethod
    def read(cls, params: QueryDict) -> "GalleryFilter":
        origin = params.get("origin", "")
        subject_id = row_id(params.get("subject", ""))
        batch_id = _uuid(params.get("batch", ""))
        return cls(
            origin=origin if origin in Origin.values else "",
            subject=Subject.objects.filter(pk=subject_id).first() if subject_id else None,
            batch=Batch.objects.filter(pk=batch_id).only("pk", "title").first()
            if batch_id
            else None,
        )

    def apply(self, assets: QuerySet[Asset]) -> QuerySet[Asset]:
        if self.origin:
            assets = assets.filter(origin=self.origin)
        if self.subject is not None:
            assets = assets.filter(subjects=self.subject)
        if self.batch is not None:
            assets = assets.filter(batch=self.batch)
        return assets

    def query(self) -> str:
        """Return the filters as a query string, for the pager's links to keep them."""
        params: dict[str, Any] = {}
        if self.origin:
            params["origin"] = self.origin
        if self.subject is not None:
            params["subject"] = self.subject.pk
        if self.batch is not None:
            params["batch"] = self.batch.pk
        return urlencode(params)

    def subjects(self) -> QuerySet[Subject]:
        return Subject.objects.order_by("name", "pk").only("pk", "name")

    def batches(self) -> list[Batch]:
        """Return the recent batches to filter by, with the chosen one even if it is older."""
        recent = list(
            Batch.objects.order_by("-created_at").only("pk", "title", "created_at")[:BATCH_CHOICES]
        )
        if self.batch is not None and self.batch.pk not in {b.pk for b in recent}:
            recent.append(self.batch)
        return recent


def _uuid(value: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(value)
    except ValueError:
        return None
