"""The shared fixtures: a data dir per test, subjects with reference photos, a mocked Ember.

The builders they and the tests use are plain functions in tests/factories.py.
"""

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import respx
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client

from studio.ember.client import EmberClient
from studio.models import Asset, Origin, Subject
from studio.worker import Worker
from tests import browsers
from tests.backup_parts import run, stored
from tests.factories import EMBER, stored_asset
from tests.respx_ember import USING


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
        return stored_asset(next(counter), data=data, origin=Origin.UPLOADED, subject=subject)

    return make


@pytest.fixture
def subject(make_subject, make_reference) -> Subject:
    """A subject with one reference photo."""
    ada = make_subject("Ada")
    make_reference(ada)
    return ada


@pytest.fixture
def person(db: None) -> User:
    """A member of the family, with a password (the studio's pages need a sign-in)."""
    return User.objects.create_user("grace", password="not-a-real-password")


@pytest.fixture
def signed_in(client: Client, person: User) -> Client:
    """Django's test client, signed in as `person`."""
    client.force_login(person)
    return client


@pytest.fixture
def ember() -> Iterator[respx.Router]:
    """Ember, mocked at the HTTP boundary; nothing unmocked may be called."""
    with respx.mock(base_url=EMBER, assert_all_called=False, using=USING) as router:
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


# --- the browser tests that did not run (for the last line of `make test`) ---------------

_browser_skips: set[str] = set()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and "browser" in report.keywords:
        _browser_skips.add(report.nodeid)


@pytest.hookimpl(trylast=True)  # after the session's fixtures are torn down
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Leave the browser-skip count for `make test`; remove the test database's lock file,
    and its -wal and -shm files once the database itself is gone (a connection that was
    still open when Django deleted it leaves them behind)."""
    target = os.environ.get(browsers.SKIP_REPORT_ENV)
    if target:
        Path(target).write_text(str(len(_browser_skips)))
    test_name = settings.DATABASES["default"].get("TEST", {}).get("NAME")
    if test_name and settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"):
        Path(f"{test_name}.worker-lock").unlink(missing_ok=True)
        if not Path(test_name).exists():
            for side in ("-wal", "-shm"):
                Path(f"{test_name}{side}").unlink(missing_ok=True)


@pytest.fixture
def backup(tmp_path: Path) -> Path:
    """A backup (`manage.py backup`) of two stored originals, for the restore's tests."""
    stored(1)
    stored(2)
    run("backup", str(tmp_path / "backup"))
    return tmp_path / "backup"
