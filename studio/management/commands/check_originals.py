"""`manage.py check_originals [--repair]`: re-hash every original (docs/operations.md)."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from studio import scrub


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

    def handle(self, *args: Any, **options: Any) -> None:
        result = scrub.check()
        if options["repair"]:
            scrub.repair(result)
        scrub.record(result)
        for line in result.lines():
            self.stdout.write(line)
        self.stdout.write(result.summary())
        if not result.passed:
            raise CommandError(
                "Some originals are missing or corrupt (see docs/operations.md).", returncode=1
            )
