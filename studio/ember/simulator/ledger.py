"""Keep the simulator's state in a file, as Ember keeps its own: each change before its answer.

The state file is JSON (reading it runs nothing): every job, history row, idempotency key,
charge and image's description. The images' bytes sit beside it, one file each in a folder
of their own, written once, so a save rewrites the descriptions, never every picture.
Everything is written under a temporary name, fsynced and renamed, and the folder fsynced:
a simulator killed at any moment (the demo's processes stopped with SIGKILL, a power cut)
finds again every job it accepted, every image it said was done, every charge and release
it answered about. Without a state file the simulator remembers nothing across a restart.
"""

from __future__ import annotations

import base64
import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

Snapshot = dict[str, Any]
Taken = tuple[int, Snapshot, dict[str, bytes]]  # the change count, the state, the images' bytes


class StateFile:
    """Where one simulator's state is kept: `path`, and its images' bytes beside it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.images = path.with_name(f"{path.name}.images")
        self._lock = threading.Lock()
        self._saved = -1  # the state's change count last written (-1: none yet)
        self._written: set[str] = set()  # the image files known to be on disk

    def load(self) -> tuple[Snapshot, dict[str, bytes]] | None:
        """Return the saved snapshot and the images' bytes by id, or None if nothing was saved.

        A file saved before the images moved beside it carries their bytes inline (base64).
        """
        if not self.path.exists():
            return None
        snapshot = json.loads(self.path.read_bytes())
        data: dict[str, bytes] = {}
        for image in snapshot["images"]:
            inline = image.pop("data", None)
            if inline is not None:
                data[image["id"]] = base64.b64decode(inline)
            elif image.pop("stored", False):
                kept = self.images / _file_name(image["id"])
                if kept.is_file():  # one removed by hand is an image whose bytes are gone
                    data[image["id"]] = kept.read_bytes()
        if self.images.is_dir():
            self._written = {entry.name for entry in self.images.iterdir()}
        return snapshot, data

    def save(self, changes: int, take: Callable[[], Taken]) -> None:
        """Write the state if it changed (`changes`, its count of changes, moved) since the
        last save; `take()` reads it, all in one moment.

        Saves run one at a time; one that finds a later save already wrote its change
        writes nothing.
        """
        if changes == self._saved:
            return
        with self._lock:
            changes, snapshot, data = take()
            if changes == self._saved:
                return
            self._write_images(data)
            for image in snapshot["images"]:
                image["stored"] = image["id"] in data
            _write_durably(self.path, json.dumps(snapshot).encode())
            self._drop_images(keep=data)
            self._saved = changes

    def _write_images(self, data: dict[str, bytes]) -> None:
        """Write the bytes of every image not on disk yet (each once)."""
        new = {
            image_id: body
            for image_id, body in data.items()
            if _file_name(image_id) not in self._written
        }
        if not new:
            return
        self.images.mkdir(parents=True, exist_ok=True)
        for image_id, body in new.items():
            _write_durably(self.images / _file_name(image_id), body, sync_dir=False)
            self._written.add(_file_name(image_id))
        _fsync_dir(self.images)

    def _drop_images(self, *, keep: dict[str, bytes]) -> None:
        """Remove the files of images whose bytes the simulator let go (after the save)."""
        kept = {_file_name(image_id) for image_id in keep}
        for name in self._written - kept:
            (self.images / name).unlink(missing_ok=True)
        self._written &= kept


def _file_name(image_id: str) -> str:
    """Return the file an image's bytes are kept in (ids are the simulator's own: img_<hex>)."""
    if not image_id.replace("_", "").isalnum():
        raise ValueError(f"not an image id of the simulator's: {image_id!r}")
    return f"{image_id}.bin"


def _write_durably(path: Path, body: bytes, *, sync_dir: bool = True) -> None:
    """Write `body` to `path` under a temporary name, fsync it and rename it into place."""
    temp = path.with_name(f"{path.name}.tmp")
    with temp.open("wb") as handle:
        handle.write(body)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, path)
    if sync_dir:
        _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
