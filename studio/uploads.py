"""The upload handler: a file held in memory, and read no further once it passes the cap.

Django's own handlers accept files of any size, holding those past
`FILE_UPLOAD_MAX_MEMORY_SIZE` (2.5 MB) in a temporary file. Here a file is held in
memory whatever its size, and skipped as soon as it passes `AVATARS_MAX_IMAGE_BYTES`
(an original is refused above it anyway), so one request holds at most the cap (a
request carries one file, `DATA_UPLOAD_MAX_NUMBER_FILES`). The originals store reads
the file whole in any case: a round trip through a temporary file took 20-40 ms of a
12 MB photo's 0.26 s upload. (The body the file is parsed from is another matter: under
uvicorn Django's ASGI handler spools a body past 2.5 MB to a temporary file before any of
this runs; docs/design.md §7.)
"""

import threading
from collections.abc import Callable

from django.conf import settings
from django.core.files.uploadedfile import UploadedFile
from django.core.files.uploadhandler import MemoryFileUploadHandler, SkipFile
from django.http import HttpRequest, HttpResponse

TOO_LARGE = "The file is too large."
# A studio upload that came with bytes and no file: "This field is required." said otherwise.
CUT_OFF = "The photo did not arrive whole, so nothing was uploaded. Choose it and upload it again."
SENT_WITHOUT_A_FILE = 4096  # bytes: the most a form without a file (token, empty part) has
# What Django's multipart parser says of a part whose headers pass the 1,024 bytes it reads:
# a long file name is what fills them.
LONG_HEADERS = "header size exceeded"
LONG_FILE_NAME = (
    "The photo's file name is too long to read: rename the file to something shorter and "
    "upload it again."
)
MB = 1024 * 1024  # bytes: the sentences' "MB", as in the other limits' sentences
BODY_TOO_LARGE = "The request body is too large (the limit is {limit:g} MB)."
FIELDS_TOO_LARGE = (
    "The request body is too large (the limit is {fields:g} MB for JSON and form fields; "
    "{upload:g} MB for an upload)."
)


class CappedMemoryUploadHandler(MemoryFileUploadHandler):
    """Hold the file in memory; skip it once more than `AVATARS_MAX_IMAGE_BYTES` arrived."""

    received = 0

    def handle_raw_input(  # type: ignore[no-untyped-def]
        self, input_data, META, content_length, boundary, encoding=None
    ) -> None:
        self.activated = True  # whatever the body's length: the cap bounds what is held

    def new_file(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        self.received = 0
        return super().new_file(*args, **kwargs)

    def receive_data_chunk(self, raw_data: bytes, start: int):  # type: ignore[no-untyped-def]
        self.received += len(raw_data)
        if self.received > settings.AVATARS_MAX_IMAGE_BYTES:
            # The view sees no file under this field and says it was too large or missing.
            raise SkipFile(TOO_LARGE)
        return super().receive_data_chunk(raw_data, start)


_TURNS = threading.BoundedSemaphore(settings.AVATARS_UPLOADS_AT_ONCE)


class UploadTurns:
    """Let `AVATARS_UPLOADS_AT_ONCE` uploads be parsed and stored at once; others wait.

    Each holds its file up to four times over while it is parsed, read and stored
    (beside its decode, which `originals.decoding()` bounds): a review sent sixteen 25 MB
    uploads at once and the web process grew by 1.36 GB. A body waiting its turn is in
    the temporary file Django's ASGI handler spooled it to, and each request has a thread
    of its own there, so waiting holds no other request up. Only multipart POSTs wait.

    Their media type is written in lower case first: it is case-insensitive, the body
    limit's door takes `MULTIPART/FORM-DATA` as an upload, and Django's parser took it
    for no form at all (a review's upload refused as "not a valid multipart form").
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.method != "POST" or not is_upload(request.content_type or ""):
            return self.get_response(request)
        media, semicolon, parameters = request.META.get("CONTENT_TYPE", "").partition(";")
        request.META["CONTENT_TYPE"] = media.strip().lower() + semicolon + parameters
        request.content_type = media.strip().lower()
        with _TURNS:
            return self.get_response(request)


def take(upload: UploadedFile) -> bytes:
    """Return the file's bytes (at most one past the size cap) and let go of the upload's own.

    One byte past the limit is enough for the originals store to refuse the file as too
    large; closing the upload frees the copy it held, so the request holds one, not two.
    """
    try:
        return upload.read(settings.AVATARS_MAX_IMAGE_BYTES + 1)
    finally:
        upload.close()


def dropped_for_size(request: HttpRequest) -> bool:
    """Say whether a missing file was dropped by the handler for passing the cap.

    The handler skips a file once it is too large, so the view sees no file at all;
    a body larger than the cap tells the two cases apart. Every upload states its length:
    the ASGI door answers one sent in chunks 411 (avatars/bodylimit.py).
    """
    return int(request.META.get("CONTENT_LENGTH") or 0) > settings.AVATARS_MAX_IMAGE_BYTES


def cut_off(request: HttpRequest) -> bool:
    """Say whether a body that carried more than an empty form came with no file: one whose
    file part never ended (a connection cut, a client that stopped), which Django's parser
    drops. A form sent without a file chosen is a few hundred bytes."""
    sent = int(request.META.get("CONTENT_LENGTH") or 0)
    return sent > SENT_WITHOUT_A_FILE and not request.FILES


def is_upload(content_type: str) -> bool:
    """Say whether a body of `content_type` is an upload (a multipart form, files and all)."""
    return content_type.lower().startswith("multipart/form-data")


def body_limit(content_type: str) -> int:
    """Return the most bytes a request body of `content_type` may have.

    An upload may carry a photo (`AVATARS_MAX_BODY_BYTES`); anything else is read whole
    into memory, as Django caps it (`DATA_UPLOAD_MAX_MEMORY_SIZE`, itself the lower).
    """
    if is_upload(content_type):
        return int(settings.AVATARS_MAX_BODY_BYTES)
    return min(settings.AVATARS_MAX_BODY_BYTES, settings.DATA_UPLOAD_MAX_MEMORY_SIZE)


def body_too_large(content_type: str) -> str:
    """Say that a body of `content_type` passed its limit, and which, in figures."""
    if is_upload(content_type):
        return BODY_TOO_LARGE.format(limit=body_limit(content_type) / MB)
    return fields_too_large()


def fields_too_large() -> str:
    """Say that JSON or a form's fields passed their limit, naming an upload's as well."""
    fields = body_limit("application/json")
    return FIELDS_TOO_LARGE.format(fields=fields / MB, upload=settings.AVATARS_MAX_BODY_BYTES / MB)
