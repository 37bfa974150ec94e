"""What the backup and restore tests share: running commands, stored originals, manifests."""

import errno
import io
import json
import sqlite3
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from studio import originals, restoring
from studio.models import Asset, Origin
from tests.factories import png_bytes
from tests.processes import server_url

# These open the SQLite files themselves; PostgreSQL's round trip is in test_backup_e2e.
sqlite_only = pytest.mark.skipif(bool(server_url()), reason="SQLite's files")
postgres_only = pytest.mark.skipif(
    not server_url(), reason="PostgreSQL only: runs in `make test-postgres`"
)


def run(command: str, *args: str) -> tuple[int, str]:
    """Run a command; return its exit code and everything it printed."""
    out = io.StringIO()
    try:
        call_command(command, *args, stdout=out, stderr=out)
    except CommandError as exc:
        return exc.returncode, f"{out.getvalue()}{exc}\n"
    return 0, out.getvalue()


def stored(seed: int, origin: str = Origin.GENERATED) -> Asset:
    original = originals.save(png_bytes(seed))
    return Asset.objects.create_stored(
        original, file_name=f"{seed}.png", origin=origin, ember_image_id=f"img_{seed}"
    )


def file_of(asset: Asset) -> Path:
    return originals.path_for(asset.sha256, originals.extension_for(asset.mime))


def rows_in(database: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(database) as conn:
        return sorted(conn.execute("SELECT sha256, origin FROM studio_asset").fetchall())


def cross_device(src: Path, dst: Path) -> None:
    """Stand in for os.link when DEST is on another filesystem."""
    raise OSError(errno.EXDEV, "Invalid cross-device link")


def manifest(dest: Path) -> dict:
    return json.loads((dest / "manifest.json").read_text())


def placed(target: Path) -> list[str]:
    """Return the names of the files in a data dir's originals folder."""
    folder = target / "originals"
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def restore_into(tmp_path: Path) -> tuple[Path, Path]:
    """Return a new data dir and its empty database file, as settings leave them."""
    target = tmp_path / "restored"
    target.mkdir()
    database = target / "db.sqlite3"
    database.touch()
    return target, database


def run_restore(src: Path, target: Path, database: Path) -> tuple[int, str]:
    """Restore as the command says it (its output), into `database` rather than the test's."""
    out = io.StringIO()
    restored = restoring.restore(src, data_dir=target, database=database)
    command = __import__("studio.management.commands.restore", fromlist=["Command"]).Command
    real = restoring.restore
    try:
        restoring.restore = lambda *args, **kwargs: restored  # type: ignore[assignment]
        call_command(command(), str(src), stdout=out)
    except CommandError as exc:
        return exc.returncode, f"{out.getvalue()}{exc}"
    finally:
        restoring.restore = real  # type: ignore[assignment]
    return 0, out.getvalue()


def stop_once_an_original_is_placed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the next original placed be followed by a Ctrl-C, as a person's in that moment."""
    real = originals.write_atomically

    def placed_then_stopped(path: Path, data: bytes) -> None:
        real(path, data)
        if path.parent.name == "originals":
            raise KeyboardInterrupt

    monkeypatch.setattr(originals, "write_atomically", placed_then_stopped)
