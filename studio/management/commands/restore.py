"""`manage.py restore SRC`: a backup into a new data dir (docs/operations.md)."""

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from studio import backups


class Command(BaseCommand):
    help = (
        "Restore the backup in SRC into this install's data dir and database, "
        "which must have no originals and no tables yet."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("src", type=Path, help="a folder `manage.py backup` wrote")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            result = backups.restore(options["src"].resolve())
        except backups.BackupError as exc:
            raise CommandError(str(exc), returncode=1) from None
        self.stdout.write(result.placer.counts("Restored"))
        for line in result.problems:
            self.stdout.write(line)
        self.stdout.write(f"Database: restored into {result.database}.")
        self.stdout.write(
            "Next: manage.py migrate, manage.py check_originals, then start the web server "
            "and run_worker (it resumes the jobs the backup holds by their ids)."
        )
        if result.problems:
            raise CommandError(
                f"{len(result.problems)} originals were not restored: "
                "run check_originals --repair (generated ones can be fetched from Ember again).",
                returncode=1,
            )
