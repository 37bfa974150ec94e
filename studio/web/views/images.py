"""The image routes: originals and thumbnails, immutable and checked, to signed-in people."""

from collections.abc import Callable

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotModified
from django.shortcuts import get_object_or_404
from django.utils.http import content_disposition_header
from django.views.decorators.http import require_GET

from studio import originals, thumbs
from studio.models import (
    Asset,
)

# A year: an image under these URLs never changes (it is named by its original's hash).
IMMUTABLE = "private, max-age=31536000, immutable"


def _image_response(
    request: HttpRequest, etag: str, mime: str, read: Callable[[], bytes]
) -> HttpResponse:
    """Answer with immutable image bytes that a browser must take for `mime` and nothing else.

    A browser that already holds this ETag gets 304 without the file being read.
    """
    quoted = f'"{etag}"'
    response: HttpResponse
    if quoted in request.headers.get("If-None-Match", ""):
        response = HttpResponseNotModified()
    else:
        try:
            data = read()
        except FileNotFoundError:
            return _unavailable("The original is not in the store.")
        except originals.ChecksumFailed as exc:
            return _unavailable(str(exc))
        response = HttpResponse(data, content_type=mime)
    response["X-Content-Type-Options"] = "nosniff"
    response["Cache-Control"] = IMMUTABLE
    response["ETag"] = quoted
    return response


def _unavailable(message: str) -> HttpResponse:
    return HttpResponse(message, status=503, content_type="text/plain; charset=utf-8")


@login_required
@require_GET
def asset_thumb(request: HttpRequest, asset_id: int, size: int) -> HttpResponse:
    """Send an asset's cached thumbnail, deriving it from the original the first time."""
    if size not in thumbs.SIZES:
        raise Http404("No such thumbnail size.")
    found = get_object_or_404(Asset.objects.only("sha256", "mime"), pk=asset_id)

    def read() -> bytes:
        return thumbs.thumbnail(sha256=found.sha256, mime=found.mime, size=size).read_bytes()

    return _image_response(request, f"{found.sha256}-{size}", thumbs.MIME, read)


@login_required
@require_GET
def asset_original(request: HttpRequest, asset_id: int) -> HttpResponse:
    """Send an asset's original bytes, checked against their hash, to a signed-in person."""
    found = get_object_or_404(Asset.objects.only("sha256", "mime"), pk=asset_id)
    return _image_response(
        request, found.sha256, found.mime, lambda: originals.read(found.sha256, found.mime)
    )


@login_required
@require_GET
def asset_download(request: HttpRequest, asset_id: int) -> HttpResponse:
    """Send an asset's original as a file to save, under its file name."""
    found = get_object_or_404(Asset.objects.only("sha256", "mime", "file_name"), pk=asset_id)
    response = _image_response(
        request, found.sha256, found.mime, lambda: originals.read(found.sha256, found.mime)
    )
    if response.status_code in (200, 304):
        name = found.file_name or f"{found.sha256}{originals.extension_for(found.mime)}"
        response["Content-Disposition"] = content_disposition_header(True, name) or "attachment"
    return response
