"""Naming an original: one save at a time, across threads and processes (docs/design.md §7)."""

import os
import threading
import time
from pathlib import Path

import pytest

from studio import originals
from tests.factories import png_bytes


@pytest.fixture
def store_dir(data_dir: Path) -> Path:
    return data_dir / "originals"


def test_a_failed_save_never_takes_away_the_file_another_save_of_the_same_bytes_acknowledged(
    store_dir, monkeypatch
):
    """Found by a review: two saves of one placeholder at once, one whose folder's fsync fails.

    A names the file; before it takes the name back (the disk did not confirm it), B
    finds the file there and acknowledges it; A then removes it: B's caller would
    record the asset and let Ember release its copy of bytes Avatars no longer holds.
    """
    data = png_bytes(seed=19)
    real = originals.fsync_dir
    named, b_looks = threading.Event(), threading.Event()
    finished: list[str] = []

    def fsync_dir(directory: Path) -> None:
        if threading.current_thread().name == "A":
            named.set()
            b_looks.wait(5)
            time.sleep(0.3)  # B's whole save fits in this, if nothing holds it back
            raise originals.NotDurable("The disk did not confirm the folder: EIO")
        real(directory)

    monkeypatch.setattr(originals, "fsync_dir", fsync_dir)
    out: dict[str, object] = {}

    def a() -> None:
        with pytest.raises(originals.NotDurable):
            originals.save(data)
        finished.append("A")

    def b() -> None:
        named.wait(5)
        b_looks.set()
        out["b"] = originals.save(data)
        finished.append("B")

    threads = [threading.Thread(target=a, name="A"), threading.Thread(target=b, name="B")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)

    saved = out["b"]
    assert isinstance(saved, originals.Original)
    assert finished == ["A", "B"], "B acknowledged the name while A could still take it back"
    assert saved.path.read_bytes() == data, "the original B acknowledged is gone"
    assert sorted(os.listdir(store_dir)) == [saved.path.name]  # no temporary file left


def test_a_save_over_a_pipe_in_an_originals_place_refuses_at_once(store_dir):
    """A pipe (or a device) put where an original belongs is not opened: it would hang."""
    data = png_bytes(seed=23)
    target = originals.path_for(originals.sha256_of(data), ".png")
    store_dir.mkdir(parents=True, exist_ok=True)
    os.mkfifo(target)
    started = time.monotonic()

    with pytest.raises(originals.ChecksumFailed):
        originals.save(data)

    took = time.monotonic() - started
    assert took < 2.0, f"the save took {took:.1f} s (bound 2 s)"
