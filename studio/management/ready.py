"""What a command needs of the database before it starts: no unfinished restore, every
migration applied."""

from django.core.management.base import CommandError
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections
from django.db.migrations.executor import MigrationExecutor

from studio import restoring
from studio.restoring import RestoreUnfinished

NOT_MIGRATED = (
    "The database is not set up for this version of Avatars ({count} migrations not "
    "applied): run `manage.py migrate` first (or `manage.py restore` into an empty data dir)."
)

UNUSABLE = (
    "Avatars cannot use its database {name} ({error}). If its disk is full or read-only, "
    "free space on it or let it be written, then run this again."
)


def require_migrated(using: str = DEFAULT_DB_ALIAS) -> None:
    """Raise CommandError saying what to run when a migration is not applied.

    A worker started in a new data dir before `migrate` printed that it ran, then 90
    lines of "no such table" (a review): one sentence instead, before anything starts.
    An unfinished restore is said first: its half-filled database lacks migrations too,
    and `migrate` is then the wrong advice (a review); the restore, run again, finishes.
    """
    require_restore_finished()
    try:
        executor = MigrationExecutor(connections[using])
        plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    except DatabaseError as exc:
        # SQLite on a full disk: "disk I/O error" as it makes its side files, once a
        # traceback of 82 lines (a review).
        name = connections[using].settings_dict["NAME"]
        raise CommandError(UNUSABLE.format(name=name, error=str(exc).rstrip("."))) from None
    if plan:
        raise CommandError(NOT_MIGRATED.format(count=len(plan)))


def require_restore_finished() -> None:
    """Raise CommandError when a restore into the data dir has not finished (its sentence)."""
    try:
        restoring.unfinished()
    except RestoreUnfinished as exc:
        raise CommandError(str(exc)) from None
