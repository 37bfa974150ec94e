"""`manage.py backup DEST`: a consistent snapshot while the worker runs (docs/operations.md)."""

import json
from pathlib import Path
from typing import Any

from django.core.management.base import CommandError, CommandParser

from studio import backups, originals
from studio.backups import STOPPED_BY, cause
from studio.management.ready import require_migrated
from studio.management.stops import NotingSigterm


class Command(NotingSigterm):
    help = (
        "Back up the database (one consistent snapshot), then the originals its rows name, "
        "then a manifest, into the new or empty folder DEST."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("dest", type=Path, help="a new or empty folder")
        parser.add_argument(
            "--link",
            action="store_true",
            help="hard-link the originals instead of copying them (no second copy on disk; "
            "a write into a file in place then damages both)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        require_migrated()
        dest = options["dest"].resolve()
        try:
            with backups.stopped_by_sigterm():
                self.stop_if_noted()
                result = backups.backup(dest, link=options["link"])
        except backups.BackupError as exc:
            raise CommandError(str(exc), returncode=1) from None
        except STOPPED_BY as exc:
            # A full disk, a folder that cannot be made, a Ctrl-C or SIGTERM: a sentence.
            self._stopped(dest, exc)
            return
        # Whole, its manifest written: what is left is saying so (a SIGTERM now is noted,
        # and a Ctrl-C says the backup is whole: it ended the process with 130, a review's).
        try:
            self._report(dest, result)
        except KeyboardInterrupt as exc:
            self._stopped(dest, exc)

    def _report(self, dest: Path, result: backups.Backup) -> None:
        kind = "SQLite (online backup API)" if result.database == "sqlite" else "pg_dump"
        self.stdout.write(f"Database: {dest / result.database_file}, by {kind}.")
        self.stdout.write(result.placer.counts("Backed up"))
        if result.landed:
            what = "original" if result.landed == 1 else "originals"
            were = "is" if result.landed == 1 else "are"
            self.stdout.write(
                f"{result.landed} {what} stored while the backup ran {were} in it too: a "
                "restore finishes their tasks' copies from them."
            )
        for line in result.problems:
            self.stdout.write(line)
        self.stdout.write(f"Manifest: {dest / backups.MANIFEST}.")
        if result.problems:
            raise CommandError(
                f"The backup is written, but {len(result.problems)} originals its rows name "
                "are not in it: run check_originals on this install.",
                returncode=1,
            )

    def _stopped(self, dest: Path, exc: BaseException) -> None:
        """Say what a backup stopped part way left; return only if it is whole."""
        interrupted = isinstance(exc, KeyboardInterrupt | backups.Terminated)
        if interrupted and (dest / backups.MANIFEST).is_file() and _synced(dest):
            # The manifest is written last, once everything it names is: a whole backup.
            whole = (
                f"The backup in {dest} is whole: {cause(exc)} only after its manifest was written"
            )
            lacking = _lacking(dest)
            if not lacking:
                self.stdout.write(f"{whole}.")
                return
            one = lacking == 1
            raise CommandError(
                f"{whole}; but {lacking} original{'' if one else 's'} its rows name "
                f"{'is' if one else 'are'} not in it: run check_originals on this install.",
                returncode=1,
            )
        if not dest.exists():
            raise CommandError(
                f"The backup stopped: {cause(exc)}. Nothing was written ({dest} was "
                "not made): deal with the cause and back up again.",
                returncode=1,
            ) from None
        raise CommandError(
            f"The backup stopped: {cause(exc)}. What it wrote in {dest} is not a backup "
            "(it has no manifest, and restore refuses it): remove that folder, deal with "
            "the cause, and back up into a new folder.",
            returncode=1,
        ) from None


def _lacking(dest: Path) -> int:
    """Count the originals the backup's manifest says its rows name and it does not hold."""
    try:
        listed = json.loads((dest / backups.MANIFEST).read_text())
        return len(listed.get("missing", [])) + len(listed.get("corrupt", []))
    except (OSError, ValueError, AttributeError, TypeError):
        return 0  # this run wrote it a moment ago; unreadable now, it says nothing more


def _synced(dest: Path) -> bool:
    """Make the names in `dest` durable, as the backup's last step would have; say if so."""
    try:
        with backups.not_stopped():
            originals.fsync_dir(dest)
    except OSError:
        return False
    return True
