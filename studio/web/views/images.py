"""The image routes: originals and thumbnails, immutable and checked, to signed-in people."""

import re
import unicodedata
from collections.abc import Callable

from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseBase,
    HttpResponseNotModified,
)
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.http import content_disposition_header
from django.views.decorators.http import require_GET

from studio import originals, sending, thumbs
from studio.models import Asset, Origin
from studio.web.views.common import login_required

# A year: an image under these URLs never changes (it is named by its original's hash).
IMMUTABLE = "private, max-age=31536000, immutable"
MAX_NAME = 120  # characters of a download's file name, its extension included
UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
SEPARATORS = re.compile(r"[-._]{2,}")
# Latin letters that have no accent to drop and would otherwise go whole ("Øberg" became
# "berg" in a review's download): spelled as their languages spell them in ASCII.
SPELLED = str.maketrans(
    {"Ø": "O", "ø": "o", "Æ": "AE", "æ": "ae", "Œ": "OE", "œ": "oe", "ß": "ss", "Ł": "L"}
    | {"ł": "l", "Đ": "D", "đ": "d", "Þ": "Th", "þ": "th", "Ð": "D", "ð": "d", "\u0131": "i"}
)
ALL_EXTENSIONS = originals.EXTENSIONS | {".jpeg", ".jpe"}


def _image_response(
    request: HttpRequest,
    etag: str,
    respond: Callable[[], HttpResponseBase],
    *,
    asset_id: int | None = None,
) -> HttpResponseBase:
    """Answer with immutable image bytes that a browser must take for their type alone.

    `respond` makes the answer with the bytes (and their type). A browser that already
    holds this ETag gets 304 without the file being read. When the original cannot be
    sent, a person who opened it (`asset_id`: an original's own address) gets a page
    back to its image; an `<img>` or a program gets the sentence alone.
    """
    quoted = f'"{etag}"'
    response: HttpResponseBase
    if sending.holds_version(request, quoted):
        response = HttpResponseNotModified()
    else:
        try:
            response = respond()
        except FileNotFoundError:
            return _unavailable(request, "The original is not in the store.", asset_id)
        except originals.ChecksumFailed as exc:
            return _unavailable(request, str(exc), asset_id)
    response["X-Content-Type-Options"] = "nosniff"
    response["Cache-Control"] = IMMUTABLE
    response["ETag"] = quoted
    return response


def _unavailable(request: HttpRequest, message: str, asset_id: int | None) -> HttpResponse:
    # Named outright: an <img> and curl accept anything (*/*), a page opened names HTML.
    if asset_id is not None and "text/html" in request.headers.get("Accept", ""):
        context = {"message": message, "asset_id": asset_id}
        return render(request, "studio/original_unavailable.html", context, status=503)
    return HttpResponse(message, status=503, content_type="text/plain; charset=utf-8")


@login_required
@require_GET
def asset_thumb(request: HttpRequest, asset_id: int, size: int) -> HttpResponseBase:
    """Send an asset's cached thumbnail, deriving it from the original the first time."""
    if size not in thumbs.SIZES:
        raise Http404("No such thumbnail size.")
    found = get_object_or_404(Asset.objects.only("sha256", "mime"), pk=asset_id)

    def respond() -> HttpResponse:
        try:
            data = thumbs.thumbnail(sha256=found.sha256, mime=found.mime, size=size).read_bytes()
        except thumbs.NotCached as drawn:
            data = drawn.data  # the disk would not keep it; the page shows it all the same
        return HttpResponse(data, content_type=thumbs.MIME)

    return _image_response(request, f"{found.sha256}-{size}-v{thumbs.RENDERING}", respond)


@login_required
@require_GET
def thumb_moved(
    request: HttpRequest, asset_id: int, size: int, rendering: int = 0
) -> HttpResponseBase:
    """Send a thumbnail asked for under an older rendering's URL to the current one."""
    if size not in thumbs.SIZES:
        raise Http404("No such thumbnail size.")
    return redirect("studio:asset-thumb", asset_id, size)


@login_required
@require_GET
def asset_original(request: HttpRequest, asset_id: int) -> HttpResponseBase:
    """Send an asset's original bytes, checked against their hash, to a signed-in person."""
    found = get_object_or_404(Asset.objects.only("sha256", "mime"), pk=asset_id)
    return _original(request, found)


def _original(request: HttpRequest, found: Asset) -> HttpResponseBase:
    """Answer with `found`'s original (304, or the page back to it when it is missing)."""
    return _image_response(
        request,
        found.sha256,
        lambda: sending.original_response(found.sha256, found.mime),
        asset_id=found.pk,
    )


@login_required
@require_GET
def asset_download(request: HttpRequest, asset_id: int) -> HttpResponseBase:
    """Send an asset's original as a file to save, under a name that says what it is."""
    found = get_object_or_404(Asset.objects.select_related("task"), pk=asset_id)
    response = _original(request, found)
    if response.status_code in (200, 304):
        name = download_name(found)
        response["Content-Disposition"] = content_disposition_header(True, name) or "attachment"
    return response


def download_name(asset: Asset) -> str:
    """Name an asset's download: safe characters only, at most `MAX_NAME` of them.

    A reference photo is saved under its name, with its type's extension when the name
    lacks it ("photo" when nothing of the name is left). A result says who is in it and
    where it came from (the provider as the studio names it: a review found the internal
    key "openai" where every page says "GPT Image"), and ends with the start of its hash, so
    the first GPT Image result of two batches are two files:
    "Ada-Bo-GPT-Image-image-1-3f2a9c1e.png".
    """
    extension = originals.extension_for(asset.mime)
    if asset.origin == Origin.UPLOADED:
        # The extension is split off before the name is made safe: "中文.png" keeps no stem,
        # and its ".png" must not become the stem "png".
        stem, dot, ending = asset.file_name.rpartition(".")
        suffix = f".{_safe(ending).lower()}" if dot else ""
        if suffix in _extensions_of(asset.mime):
            extension = suffix
        elif suffix not in ALL_EXTENSIONS:  # not an image type's extension: part of the name
            stem = asset.file_name
        return _bounded(_safe(stem) or "photo", "", extension)
    task = asset.task
    label = task.provider_label if task else ""
    tail = [label or asset.provider or (task.provider if task else "") or "result"]
    if task is not None:
        tail += [task.frame, str(task.ordinal)]
    tail.append(asset.sha256[:8])
    names = asset.subjects.order_by("name", "pk").values_list("name", flat=True)
    head = "-".join(filter(None, (_safe(name) for name in names)))
    return _bounded(head, "-".join(filter(None, (_safe(part)[:40] for part in tail))), extension)


def _safe(text: str) -> str:
    """Keep ASCII letters, digits, '-', '_' and '.'; accents dropped, the rest become '-'."""
    spelled = unicodedata.normalize("NFKD", text.translate(SPELLED))
    ascii_text = spelled.encode("ascii", "ignore").decode()
    dashed = UNSAFE.sub("-", ascii_text)
    # No "..", no leading dot (a hidden file), no run of separators.
    return SEPARATORS.sub(lambda run: run.group(0)[0], dashed).strip("-._")


def _bounded(head: str, tail: str, extension: str) -> str:
    """Join `head`, `tail` and `extension`, cutting `head` so the whole fits `MAX_NAME`."""
    room = MAX_NAME - len(extension) - (len(tail) + 1 if tail and head else len(tail))
    head = head[: max(room, 0)].rstrip("-._")
    return "-".join(filter(None, (head, tail)))[: MAX_NAME - len(extension)] + extension


def _extensions_of(mime: str) -> set[str]:
    """The extensions a file of `mime` may carry (".jpg" and ".jpeg" are both JPEG)."""
    extension = originals.extension_for(mime)
    return {extension, ".jpeg", ".jpe"} if extension == ".jpg" else {extension}
