"""`manage.py migrate`, refused while a restore into this data dir has not finished.

A half-filled database lacks migrations, so Django's own `migrate` would go ahead and
apply them all to it (found by a review): the install would then look set up with half
its rows. The restore, run again, finishes it; that is what this says instead.
"""

from typing import Any

from django.core.management.commands import migrate

from studio.management.ready import require_restore_finished


class Command(migrate.Command):
    def handle(self, *args: Any, **options: Any) -> None:
        require_restore_finished()
        super().handle(*args, **options)
