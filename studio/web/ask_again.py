"""A new batch filled in to ask again for a batch's failed images (the batch page and its
failed rows link here).

A job that failed at Ember is not sent again by itself (it may have been paid for): a person
asks again in a new batch, whose button names the spend before anything is paid. A review
found no way there but typing the whole form again. The form comes filled in with the
batch's prompt, subjects and photos, the frames where an image failed, and for each
provider as many candidates as failed in one of those frames: at least as many images as
failed (a provider is asked for in every frame ticked), and the button says how many.
Asking again for the same batch once more (Back, the link again, another person) asks
first, as a batch repeated does (`engine.recent_twin`), however long since.
"""

import uuid
from collections import Counter
from typing import Any

from django.conf import settings
from django.http import HttpRequest

from studio import engine
from studio.models import Batch, TaskState

AGAIN = " (again)"  # how a batch asking again is titled: after the batch it asks again
TITLE = Batch._meta.get_field("title").max_length or 200


def batch_asked_again(request: HttpRequest) -> Batch | None:
    """Return the batch whose failed images `?again=<batch id>` asks for again, if any."""
    wanted = request.GET.get("again", "") if request.method == "GET" else ""
    try:
        return Batch.objects.filter(pk=uuid.UUID(wanted)).first() if wanted else None
    except ValueError:  # not a batch id: no batch, as for an unknown one
        return None


def initial(batch: Batch) -> tuple[dict[str, Any], int]:
    """Return the form's initial values asking again for `batch`'s failed images, and how
    many failed ({} and 0 when none did)."""
    failed = Counter(batch.tasks.filter(state=TaskState.FAILED).values_list("provider", "frame"))
    if not failed:
        return {}, 0
    request = batch.request
    values: dict[str, Any] = {
        "again_of": batch.pk,
        # A title of its own: two batches of one title read alike wherever they are named.
        "title": f"{batch.title.removesuffix(AGAIN)[: TITLE - len(AGAIN)]}{AGAIN}",
        "prompt": request.get("prompt", ""),
        "subjects": request.get("subjects", []),
        "references": request.get("references") or [],
        "frames": [frame for frame in engine.FRAMES if any(f == frame for _p, f in failed)],
    }
    for provider in settings.AVATARS_PROVIDERS:
        counts = [n for (p, _f), n in failed.items() if p == provider]
        values[f"candidates_{provider}"] = max(counts, default=0)
    return values, sum(failed.values())
