"""Template tags for pictures: the words under an image, and a batch's results section."""

from typing import Any

from django import template

from studio import thumbs
from studio.engine import sets
from studio.models import Asset, Batch, Origin
from studio.web.views.results import results_context

register = template.Library()


@register.filter
def caption(asset: Asset) -> str:
    """Say who is in `asset` and what it is: "Ada, Bo · GPT Image · image #1", "Ada · ada.png".

    Reads `asset.subjects.all()`: prefetch the subjects where many captions are shown.
    """
    names = ", ".join(subject.name for subject in asset.subjects.all())
    what = asset.file_name if asset.origin == Origin.UPLOADED else str(asset)
    return " · ".join(part for part in (names, what) if part)


@register.filter
def images_at(places: list[int]) -> str:
    """Name chosen images by their places in a set: "Image 2", "Images 2, 3 and 5"."""
    return sets.images_at(places)


@register.filter
def shown_size(asset: Asset) -> str:
    """Say an image's size as it is shown: "3024 x 4032 px" for a phone's portrait, whose
    pixels are stored landscape and turned by its EXIF Orientation (as its thumbnails are)."""
    width, height = asset.width, asset.height
    if thumbs.turned(asset.sha256, asset.mime):
        width, height = height, width
    return f"{width} \u00d7 {height} px"  # the multiplication sign


# A tag rather than the view's context: the batch page's view belongs to the progress
# section, and the results section brings its own data to the page that includes it.
@register.inclusion_tag("studio/_results.html", takes_context=True)
def results_section(context: template.Context, batch: Batch) -> dict[str, Any]:
    """Render the delivered images of `batch` with the page's request and CSRF token."""
    return {
        **results_context(batch),
        "request": context.get("request"),
        "csrf_token": context.get("csrf_token"),
    }
