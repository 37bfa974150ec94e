"""The archive as the worker's copy sees it (docs/design.md §6.7): is an original held, whole,
written again, or already there for an image Ember no longer has."""

import asyncio
from typing import Any

from studio import originals
from studio.models import Asset


async def held(asset: Asset) -> bool:
    """Say whether the original of `asset` is in the archive under its name.

    Looked at under the naming lock, so no removal is between its look for rows and its
    unlink. Usually free, and then a stat on the loop; else from a thread that waits.
    """
    held = originals.holds(asset.sha256, asset.mime, wait=False)
    if held is None:
        held = await asyncio.to_thread(originals.holds, asset.sha256, asset.mime)
    return bool(held)


def whole(asset: Asset) -> bool:
    """Say whether the original of `asset` still hashes to its name (read from a thread)."""
    try:
        originals.read(asset.sha256, asset.mime)
    except (OSError, originals.ChecksumFailed):
        return False
    return True


def found(image: dict[str, Any]) -> originals.Original | None:
    """Return the archive's original of the image Ember answered with, if it holds its bytes
    whole (hashing to Ember's `sha256`); None when it does not, or nothing names them.

    Under the type Ember said first, then the others: the archive names a file by what its
    bytes are, which Ember's word may not match.
    """
    sha256, said = image.get("sha256"), image.get("mime")
    if not isinstance(sha256, str):
        return None
    types = [mime for mime, _ext in originals.FORMATS.values()]
    for mime in sorted(types, key=lambda mime: mime != said):
        try:
            return originals.save(originals.read(sha256, mime))
        except (OSError, ValueError, originals.ChecksumFailed):
            continue  # missing, damaged, or not an image: under another type, perhaps
    return None


def put_back(data: bytes, asset: Asset) -> originals.Original:
    """Write the original of `asset` again over what is there, if `data` is its bytes."""
    path = originals.put_back(data, sha256=asset.sha256, mime=asset.mime)
    return originals.Original(
        sha256=asset.sha256, path=path, info=originals.inspect(data), size=len(data)
    )
