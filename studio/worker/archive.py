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
    whole (hashing to Ember's `sha256`, under any type); None when it does not."""
    held = originals.held_for(image.get("sha256"), image.get("mime"))
    if held is None:
        return None
    try:
        return originals.save(held[0])
    except (OSError, ValueError, originals.ChecksumFailed):
        return None  # not an image after all, or the disk refused to name it


def put_back(data: bytes, asset: Asset) -> originals.Original:
    """Write the original of `asset` again over what is there, if `data` is its bytes."""
    path = originals.put_back(data, sha256=asset.sha256, mime=asset.mime)
    return originals.Original(
        sha256=asset.sha256, path=path, info=originals.inspect(data), size=len(data)
    )
