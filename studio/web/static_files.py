"""Static files under ASGI, read a chunk at a time off the event loop.

WhiteNoise answers a static file with a file response whose iterator is synchronous. Under
uvicorn Django then reads the whole file into a list in a thread, and warns each time
("StreamingHttpResponse must consume synchronous iterators ..."): eight lines in the demo's
log for one page's stylesheet, scripts and icon (a review). The same file is handed over
as an asynchronous iterator instead; under WSGI nothing changes.
"""

import asyncio
from collections.abc import AsyncIterator
from typing import BinaryIO

from django.http import FileResponse, HttpRequest, HttpResponseBase
from django.utils.deprecation import MiddlewareMixin

CHUNK = 64 * 1024  # bytes read at a time, as FileResponse reads them


class AsyncStaticFiles(MiddlewareMixin):
    """Give a file response served under ASGI an asynchronous iterator over its file."""

    def process_response(
        self, request: HttpRequest, response: HttpResponseBase
    ) -> HttpResponseBase:
        served_by_asgi = hasattr(request, "scope")
        if served_by_asgi and isinstance(response, FileResponse) and not response.is_async:
            file = response.file_to_stream
            if file is not None:  # its closing stays with the response's own closers
                response.streaming_content = _chunks(file)
        return response


async def _chunks(file: BinaryIO) -> AsyncIterator[bytes]:
    while chunk := await asyncio.to_thread(file.read, CHUNK):
        yield chunk
