"""The shared cast: a data dir per test, subjects with reference photos, a mocked Ember."""

import hashlib
import io
import itertools
import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import respx
from asgiref.sync import async_to_sync
from django.conf import settings
from django.utils import timezone
from PIL import Image

from studio import engine, originals
from studio.ember.client import EmberClient
from studio.models import Asset, Attempt, AvatarSet, Origin, SetItem, Subject, Task, TaskState
from studio.store import move
from studio.worker import Worker
from tests import browsers

EMBER = "http://ember.test"


def png_bytes(seed: int = 0, size: tuple[int, int] = (64, 48), fmt: str = "PNG") -> bytes:
    """Return a small, real image whose bytes differ by seed."""
    rng = random.Random(seed)
    img = Image.new("RGB", size, (rng.randrange(256), rng.randrange(256), rng.randrange(256)))
    for _ in range(20):
        img.putpixel((rng.randrange(size[0]), rng.randrange(size[1])), (rng.randrange(256),) * 3)
    out = io.BytesIO()
    img.save(out, fmt)
    return out.getvalue()


@pytest.fixture(autouse=True)
def data_dir(tmp_path: Path, settings: Any) -> Path:
    """Give every test its own data dir (originals, thumbs, worker.lock)."""
    path = tmp_path / "data"
    path.mkdir()
    settings.AVATARS_DATA_DIR = path
    settings.EMBER_URL = EMBER
    settings.EMBER_TOKEN = "test-token"
    return path


@pytest.fixture
def make_subject(db: None):
    def make(name: str = "Ada") -> Subject:
        return Subject.objects.create(name=name, slug=name.lower().replace(" ", "-"))

    return make


@pytest.fixture
def make_reference(db: None):
    """Store a real reference photo for a subject, as an upload would."""
    counter = iter(range(1000, 10_000))

    def make(subject: Subject, data: bytes | None = None) -> Asset:
        data = data or png_bytes(next(counter))
        original = originals.save(data)
        asset = Asset.objects.create_stored(
            original,
            file_name=f"{subject.slug}{original.info.extension}",
            origin=Origin.UPLOADED,
        )
        asset.subjects.add(subject)
        return asset

    return make


@pytest.fixture
def subject(make_subject, make_reference) -> Subject:
    """A subject with one reference photo."""
    ada = make_subject("Ada")
    make_reference(ada)
    return ada


@pytest.fixture
def ember() -> Iterator[respx.Router]:
    """Ember, mocked at the HTTP boundary; nothing unmocked may be called."""
    with respx.mock(base_url=EMBER, assert_all_called=False) as router:
        yield router


@pytest.fixture
def worker() -> Worker:
    """A worker with the waits shrunk for tests (the logic is unchanged)."""
    return Worker(
        client=EmberClient(),
        workers=4,
        poll_interval=0,
        tick=0,
        fetch_retry_delay=0,
    )


def drain(worker: Worker) -> None:
    """Run the worker until nothing is due or in hand (`run_worker --once`), as the owner."""
    worker.lock()
    try:
        async_to_sync(worker.run)(once=True)
    finally:
        worker.unlock()


def batch_request(subject: Subject, **overrides: Any) -> dict[str, Any]:
    request: dict[str, Any] = {
        "title": "Spring avatars",
        "prompt": "a friendly portrait, watercolour",
        "subjects": [subject.pk],
        "providers": [{"provider": "openai", "candidates": 1}],
        "frames": ["image"],
    }
    request.update(overrides)
    return request


_shas = (hashlib.sha256(f"generated {i}".encode()).hexdigest() for i in itertools.count())


def generated_asset(*, history_id: str = "", task: Task | None = None, **fields: Any) -> Asset:
    """An Ember result's asset row (its file need not exist), history id optional."""
    return Asset.objects.create(
        sha256=next(_shas),
        file_name="candidate.png",
        mime="image/png",
        width=1024,
        height=1024,
        size=1000,
        origin=Origin.GENERATED,
        ember_history_id=history_id,
        task=task,
        batch=task.batch if task else None,
        **fields,
    )


def a_clip_sent_once(subject: Subject) -> Task:
    """A queued clip whose first send's answer was lost: Ember may have it under its key."""
    task = engine.generate(request=batch_request(subject, frames=["clip"])).tasks.get()
    Attempt.objects.create(
        task=task,
        number=1,
        idempotency_key=task.idempotency_key,
        submitted_at=timezone.now(),
        outcome=Attempt.Outcome.UNKNOWN,
    )
    return move(
        task, TaskState.QUEUED, phase="Ember's answer was lost; re-sending under the same key"
    )


def a_set(*assets: Asset, name: str = "Family 2026") -> AvatarSet:
    """A set holding `assets` in order."""
    chosen = AvatarSet.objects.create(name=name)
    for position, asset in enumerate(assets):
        SetItem.objects.create(avatar_set=chosen, asset=asset, position=position)
    return chosen


# --- the browser tests that did not run (for the last line of `make test`) ---------------

_browser_skips: set[str] = set()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and "browser" in report.keywords:
        _browser_skips.add(report.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Leave the browser-skip count for `make test`; remove the test database's lock file."""
    target = os.environ.get(browsers.SKIP_REPORT_ENV)
    if target:
        Path(target).write_text(str(len(_browser_skips)))
    test_name = settings.DATABASES["default"].get("TEST", {}).get("NAME")
    if test_name and settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"):
        Path(f"{test_name}.worker-lock").unlink(missing_ok=True)


__all__ = [
    "EMBER",
    "a_clip_sent_once",
    "a_set",
    "batch_request",
    "drain",
    "generated_asset",
    "png_bytes",
    "settings",
]
