"""`manage.py check_originals [--repair [--from-backup SRC] [--into-empty]]`: re-hash them."""

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import OperationalError

from studio import scrub
from studio.management.ready import require_migrated


class Command(BaseCommand):
    help = (
        "Re-hash every original; report missing and corrupt files, files no row names and "
        "temporary files. Exits 1 when an original is missing or corrupt."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--repair",
            action="store_true",
            help="fetch missing or corrupt generated originals again from Ember",
        )
        parser.add_argument(
            "--from-backup",
            type=Path,
            metavar="SRC",
            help="with --repair: put missing or corrupt originals (uploaded photos too) back "
            "from the backup folder SRC first, each checked against its hash",
        )
        parser.add_argument(
            "--into-empty",
            action="store_true",
            help="with --repair: repair into an originals folder that holds none of them "
            "(a new disk for them), which is otherwise taken for a disk not mounted",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        require_migrated()
        # Arguments first: re-hashing every original can take a long time.
        backup = options["from_backup"]
        if backup and not options["repair"]:
            raise CommandError("--from-backup goes with --repair.", returncode=2)
        refusal = scrub.backup_refusal(backup) if backup else None
        if refusal:
            raise CommandError(refusal, returncode=2)
        result = scrub.check()
        # Not into a folder made anew where a disk is not mounted: its files would hide.
        gone = options["repair"] and result.folder_gone is not None
        gone = gone and not (result.folder_empty and options["into_empty"])
        try:
            if options["repair"] and not gone:
                scrub.repair(result, backup=backup)
        finally:
            # Said before it is recorded: a database that refuses the record (a full or
            # read-only disk) lost every line, the repairs made too (a review).
            for line in result.lines():
                self.stdout.write(line)
            self.stdout.write(result.summary())
        unrecorded = _record(result)
        if gone:
            new_disk = (
                " If it is meant to be empty (a new disk for the originals), run this with "
                "--into-empty."
                if result.folder_empty
                else ""
            )
            raise CommandError(
                f"Nothing was repaired: the folder {result.folder_gone} {result.folder_state}. "
                f"Put it back (mount its disk), then run this again.{new_disk}{unrecorded}",
                returncode=1,
            )
        if not result.passed:
            raise CommandError(
                f"Some originals are missing or corrupt (see docs/operations.md).{unrecorded}",
                returncode=1,
            )
        if unrecorded:
            raise CommandError(unrecorded.strip(), returncode=1)


def _record(result: scrub.Scrub) -> str:
    """Keep the result for the admin's page; return why it was not kept ("" when it was)."""
    try:
        scrub.record(result)
    except OperationalError as exc:
        return (
            f" This check was not kept for the admin's page: the database refused it "
            f"({str(exc).rstrip('.')}); free space on its disk or let it be written."
        )
    return ""
