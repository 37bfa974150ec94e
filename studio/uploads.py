"""Upload handlers that stop reading a file once it passes the originals' size cap.

Django's own handlers accept files of any size (to a temporary file); an original is
refused above `AVATARS_MAX_IMAGE_BYTES` anyway, so there is no reason to let one
request fill the disk first.
"""

from django.conf import settings
from django.core.files.uploadhandler import (
    MemoryFileUploadHandler,
    SkipFile,
    TemporaryFileUploadHandler,
)
from django.http import HttpRequest

TOO_LARGE = "The file is too large."


class _Capped:
    """Count a file's bytes as they arrive; skip the file when it passes the cap."""

    received = 0

    def new_file(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        self.received = 0
        return super().new_file(*args, **kwargs)  # type: ignore[misc]

    def receive_data_chunk(self, raw_data: bytes, start: int):  # type: ignore[no-untyped-def]
        self.received += len(raw_data)
        if self.received > settings.AVATARS_MAX_IMAGE_BYTES:
            # The view sees no file under this field and says it was too large or missing.
            raise SkipFile(TOO_LARGE)
        return super().receive_data_chunk(raw_data, start)  # type: ignore[misc]


class CappedMemoryUploadHandler(_Capped, MemoryFileUploadHandler):
    pass


class CappedTemporaryUploadHandler(_Capped, TemporaryFileUploadHandler):
    pass


def dropped_for_size(request: HttpRequest) -> bool:
    """Say whether a missing file was dropped by these handlers for passing the cap.

    The handlers skip a file once it is too large, so the view sees no file at all;
    a body larger than the cap tells the two cases apart.
    """
    return int(request.META.get("CONTENT_LENGTH") or 0) > settings.AVATARS_MAX_IMAGE_BYTES
