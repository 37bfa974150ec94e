"""`manage.py restore SRC`: a backup into a new data dir (docs/operations.md)."""

from datetime import datetime
from pathlib import Path
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.utils import timezone

from studio import backups, restoring
from studio.backups import STOPPED_BY, cause
from studio.management.stops import NotingSigterm
from studio.models import POLL_BOUND

NEXT = (
    "Next: manage.py migrate, manage.py check_originals, then start the web server "
    "and run_worker (it resumes the jobs the backup holds by their ids)."
)


class Command(NotingSigterm):
    help = (
        "Restore the backup in SRC into this install's data dir and database, "
        "which must have no originals and no tables yet."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("src", type=Path, help="a folder `manage.py backup` wrote")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            with backups.stopped_by_sigterm():
                self.stop_if_noted()
                result = restoring.restore(options["src"].resolve())
        except restoring.AlreadyRestored as exc:
            self.stdout.write(str(exc))
            self.stdout.write(NEXT)
            return
        except backups.BackupError as exc:
            raise CommandError(str(exc), returncode=1) from None
        except STOPPED_BY as exc:
            # A full disk, a Ctrl-C, a SIGTERM: what it placed was taken away
            # (restoring.undo), so it can simply be run again.
            raise CommandError(
                f"The restore stopped: {cause(exc)}. What it had placed was taken away and "
                "the database left empty: deal with the cause and run it again.",
                returncode=1,
            ) from None
        self.stdout.write(result.placer.counts("Restored"))
        for line in result.problems:
            self.stdout.write(line)
        self.stdout.write(f"Database: restored into {result.database}.")
        if result.held_back:
            self.stdout.write(
                f"Held back {result.held_back} task(s) the lost install may have sent after "
                "the backup (images waiting to be sent, and tasks that had failed with nothing "
                "sent, which a person may have queued again): they rest uncertain and the "
                "worker looks for the images in Ember's history. Do not resubmit them before "
                f"the poll bound ({POLL_BOUND / 60:.0f} minutes) has passed: a send of the lost "
                "install may still be running."
            )
        self.stdout.write(_since(result.taken))
        self.stdout.write(NEXT)
        if result.problems:
            raise CommandError(
                f"{len(result.problems)} problem(s) above: run check_originals --repair "
                "(generated originals are fetched from Ember again; --from-backup SRC takes "
                "them from another backup).",
                returncode=1,
            )


def _since(taken: str) -> str:
    """Say that what was done after the backup is not in it, and where its originals are.

    A review restored a backup and lost, with no word, a batch paid for after it: its
    originals were on the lost install's disk only, and Ember had let go of its copies.
    """
    try:
        when = f"at {timezone.localtime(datetime.fromisoformat(taken)):%Y-%m-%d %H:%M %Z}"
    except ValueError:
        when = "when it was taken"
    return (
        f"What was planned or paid for after this backup ({when}) is not in it: keep the "
        "lost install's data dir if it is still there. Its originals/ holds the originals "
        "paid for since, which no restored row names (check_originals --repair "
        "--from-backup takes only those the restored rows name)."
    )
