"""A restore's marks in the data dir: RESTORE-UNFINISHED while one runs, RESTORED after.

The marker names the backup and the database a restore fills. Run again after a kill, the
same restore finishes the job over what the killed run placed; it does so only into the
database the marker names: a run pointed at another (a wrong environment) would have
replaced or, failing, emptied a live database without asking whether it was empty, as a
first run asks (a review's dropped a live PostgreSQL database with exit 0).
"""

import os
from pathlib import Path

from django.conf import settings
from django.db import connection

from studio import originals
from studio.backups import BackupError

MARKER = "RESTORE-UNFINISHED"  # in the data dir while a restore is under way
DONE = "RESTORED"  # in the data dir once a restore finished: which backup it was


class RestoreUnfinished(Exception):
    """A restore into this data dir has not finished: no command that uses its database may run."""


def database_named(database: Path | None) -> str:
    """Say which database a restore fills: the SQLite file, or PostgreSQL's server and name."""
    if database is not None:
        return str(database.resolve())
    params = connection.settings_dict
    host, port = params.get("HOST") or "localhost", params.get("PORT") or 5432
    return f"postgresql://{host}:{port}/{params['NAME']}"


def mark(marker: Path, src: str, *, into: str) -> None:
    """Leave the marker, durably and whole, before anything is placed.

    Written aside and renamed into place: a run killed while writing it in place left
    it empty, naming no restore to run again (found by a review).
    """
    marker.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    for stale in marker.parent.glob(f"{marker.name}.*.tmp"):  # a killed run's
        stale.unlink(missing_ok=True)
    aside = marker.with_name(f"{marker.name}.{os.getpid()}.tmp")
    aside.write_text(f"restoring {src}\ninto {into}\n")
    originals.fsync_file(aside)
    os.replace(aside, marker)
    originals.fsync_dir(marker.parent)


def resumable(marker: Path, src: Path, *, into: str) -> None:
    """Refuse to go on with the unfinished restore `marker` names unless it is this one,
    into the same database. (A marker of an older version names no database.)"""
    said = marker.read_text().splitlines()
    if said[0] != f"restoring {src}":
        raise BackupError(
            f"Another restore into this data dir has not finished ({marker}: {said[0]}): "
            "run that one again (an intact copy of that backup at that path does), or use a "
            "new data dir."
        )
    filling = next((line.removeprefix("into ") for line in said if line.startswith("into ")), "")
    if filling and filling != into:
        raise BackupError(
            f"The unfinished restore in this data dir was filling the database {filling}, "
            f"and this run is pointed at {into}: point it at {filling} (AVATARS_DATA_DIR, "
            "DATABASE_URL) and run it again. Nothing was changed."
        )


def finished_from(data_dir: Path) -> str | None:
    """Return the backup folder a finished restore into `data_dir` came from, if any."""
    try:
        said = (data_dir / DONE).read_text()
    except (OSError, UnicodeDecodeError):
        return None
    return said.removeprefix("restored ").rstrip("\n") if said.startswith("restored ") else None


def unfinished(data_dir: Path | None = None) -> None:
    """Raise RestoreUnfinished when a restore into the data dir has not finished."""
    marker = (data_dir or Path(settings.AVATARS_DATA_DIR)) / MARKER
    if marker.exists():
        raise RestoreUnfinished(
            f"A restore into this data dir has not finished ({marker} is there): run the "
            "same `manage.py restore` again before anything else uses this install."
        )
