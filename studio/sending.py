"""Send a stored original without holding it in memory: checked from disk, then streamed.

A response that holds a 25 MB original whole keeps it in memory until the slowest
client has read it: forty connections that asked for one and read nothing held 882 MB of
a web process (a review, over uvicorn). So the open file is hashed a chunk at a time,
and the same open file is then sent a chunk at a time, each read only when the server
asks for the next (uvicorn waits while a client's socket is full).

What is sent is hashed again as it goes, and its last chunk held back until the whole
hashes to the original's name: bytes written over the file in place after the first
check (a disk fault, a hand edit) were sent as a complete 200 under the right ETag,
which a browser keeps for a year (a review). Such a body is cut short instead: the
server closes the connection before its Content-Length, which no client takes as whole.
"""

import asyncio
import hashlib
import logging
import os
from collections.abc import AsyncIterator
from typing import BinaryIO

from django.conf import settings
from django.http import HttpRequest, StreamingHttpResponse

from studio import originals

CHUNK = 256 * 1024  # bytes read (and sent) at a time

log = logging.getLogger("studio.sending")


def open_checked(sha256: str, mime: str) -> BinaryIO:
    """Open a stored original, checked against its hash; the file is at its start.

    FileNotFoundError when it is not there; ChecksumFailed when what is there is not its
    bytes, a folder, a device or a symbolic link in its place (looked at before it is
    opened, so a pipe does not hang), or a file past the image cap.
    """
    path = originals.path_of(sha256, mime)
    try:
        originals.check_regular(path, links=False)  # as `originals.read` looks, before opening
    except originals.NotAnOriginal:
        raise originals.ChecksumFailed() from None
    file = path.open("rb")
    try:
        # Looked at again once open: what was looked at may have been replaced since.
        if os.fstat(file.fileno()).st_size > settings.AVATARS_MAX_IMAGE_BYTES:
            raise originals.ChecksumFailed()
        if hashlib.file_digest(file, "sha256").hexdigest() != sha256:
            raise originals.ChecksumFailed()
        file.seek(0)
    except BaseException:
        file.close()
        raise
    return file


def holds_version(request: HttpRequest, quoted_etag: str) -> bool:
    """Say whether the client's If-None-Match names this version, or any ("*", RFC 9110
    13.1.2): either way it holds the bytes, which never change under their name."""
    header = request.headers.get("If-None-Match", "")
    return header.strip() == "*" or quoted_etag in header


def original_response(sha256: str, mime: str) -> StreamingHttpResponse:
    """Answer with a stored original, checked first, then streamed from the same open file.

    Raises what `open_checked` raises, before anything is sent.
    """
    file = open_checked(sha256, mime)
    size = os.fstat(file.fileno()).st_size
    response = StreamingHttpResponse(_chunks(file, sha256, size), content_type=mime)
    response["Content-Length"] = str(size)
    return response


async def _chunks(file: BinaryIO, sha256: str, size: int) -> AsyncIterator[bytes]:
    """Yield the first `size` bytes of `file` a chunk at a time, read off the event loop,
    the last only once they all hash to `sha256`; close the file however it ends.

    Raises ChecksumFailed instead of the last chunk when they do not: the answer has
    started, so all the server can do is close the connection short of its length.
    """
    digest = hashlib.sha256()
    held = b""
    left = size
    try:
        while left and (chunk := await asyncio.to_thread(file.read, min(CHUNK, left))):
            digest.update(chunk)
            left -= len(chunk)
            if held:
                yield held
            held = chunk
        if left or digest.hexdigest() != sha256:
            log.error("original %s changed on disk while it was sent: the answer was cut", sha256)
            raise originals.ChecksumFailed()
        yield held
    finally:
        file.close()
