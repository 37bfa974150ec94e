"""What the worker costs the database: statements, commits and hops counted; the thread timed.

Timings are noisy on a busy machine; counts are not. `WorkerCost` counts every
SQL statement SQLite runs for the worker (its statement trace), the commits among
them (explicit COMMITs plus writes made in autocommit mode) and the hops to the
worker's one database thread (calls through `studio.worker.transitions.db`). The
throughput bench prints them beside its ratio; tests/test_worker_cost.py holds
them under upper bounds. `ThreadTime` times the same hops instead: how long the
database thread spent running them and how long each took from the asking
coroutine's side (waiting for the thread included); the slots bench prints them,
to say whether the one thread is what limits it.
"""

import sqlite3
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

from django.db import connection
from django.db.backends.signals import connection_created

from studio.worker import transitions

TRANSACTION_VERBS = ("BEGIN", "COMMIT", "END", "ROLLBACK", "SAVEPOINT", "RELEASE")


DB = Callable[[Callable[..., Any]], Callable[..., Awaitable[Any]]]  # `transitions.db`'s shape


@contextmanager
def replaced_db(wrap: Callable[[DB], DB]) -> Iterator[None]:
    """Make every worker module hand its database calls to `wrap(transitions.db)` meanwhile."""
    real = transitions.db
    # Every worker module holds its own reference to `db` (from ... import db).
    holders = [
        module
        for name, module in list(sys.modules.items())
        if name.startswith("studio.worker") and getattr(module, "db", None) is real
    ]
    wrapped = wrap(real)
    for module in holders:
        module.db = wrapped  # type: ignore[attr-defined]
    try:
        yield
    finally:
        for module in holders:
            module.db = real  # type: ignore[attr-defined]


class WorkerCost:
    """Count statements, commits and database-thread hops while `counting()` is open."""

    def __init__(self) -> None:
        self.statements = 0  # every statement but BEGIN/COMMIT/ROLLBACK and savepoints
        self.commits = 0
        self.hops = 0
        self.sql: list[str] | None = None  # set to a list to keep every statement seen
        self._traced: list[Any] = []  # the DB-API connections whose statements we count

    @contextmanager
    def counting(self) -> Iterator["WorkerCost"]:
        """Trace this thread's open connection and every new one; count calls through `db`."""
        connection_created.connect(self.attach)
        if connection.connection is not None:
            self.attach(None, connection)
        try:
            with replaced_db(self._counted):
                yield self
        finally:
            connection_created.disconnect(self.attach)
            for traced in self._traced:
                with suppress(sqlite3.ProgrammingError):  # closed meanwhile: nothing to stop
                    traced.set_trace_callback(None)

    def _counted(self, real: DB) -> DB:
        """Return `db` that counts each call it hands to the database thread."""

        def db(fn: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
            hop = real(fn)

            async def call(*args: Any, **kwargs: Any) -> Any:
                self.hops += 1
                return await hop(*args, **kwargs)

            return call

        return db

    def attach(self, sender: object, connection: Any, **kwargs: object) -> None:
        """Set SQLite's statement trace on `connection` (a Django connection wrapper).

        Other databases have no such trace: on them only the hops are counted.
        """
        if connection.vendor != "sqlite":
            return
        in_transaction = False

        def trace(sql: str) -> None:
            nonlocal in_transaction
            if self.sql is not None:
                self.sql.append(sql)
            verb = sql.lstrip().split(None, 1)[0].upper() if sql.strip() else ""
            if verb not in TRANSACTION_VERBS:
                self.statements += 1
            if verb == "BEGIN":
                in_transaction = True
            elif verb in ("COMMIT", "END"):
                in_transaction = False
                self.commits += 1
            elif verb == "ROLLBACK" and " TO " not in f" {sql.upper()} ":
                in_transaction = False  # not ROLLBACK TO SAVEPOINT, which stays inside
            elif verb in ("INSERT", "UPDATE", "DELETE", "REPLACE") and not in_transaction:
                self.commits += 1

        connection.connection.set_trace_callback(trace)
        self._traced.append(connection.connection)

    def per_task(self, tasks: int) -> dict[str, float]:
        """Return the counts divided by `tasks`."""
        return {
            "statements": self.statements / tasks,
            "commits": self.commits / tasks,
            "hops": self.hops / tasks,
        }


class ThreadTime:
    """Time the worker's hops to its database thread while `timing()` is open.

    `busy` is the seconds the thread spent running them (its share of a run says how
    near the one thread is to being the limit); `hops` holds, for each, the seconds
    from the asking coroutine's side: the queue before the thread took it, the run,
    and the way back to the event loop.
    """

    def __init__(self) -> None:
        self.busy = 0.0
        self.hops: list[float] = []

    @contextmanager
    def timing(self) -> Iterator["ThreadTime"]:
        with replaced_db(self._timed):
            yield self

    def median_hop(self) -> float:
        """Return the median seconds a hop took (0 when there was none)."""
        return statistics.median(self.hops) if self.hops else 0.0

    def _timed(self, real: DB) -> DB:
        """Return `db` that times each call on the thread and from the caller's side."""

        def db(fn: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
            def run(*args: Any, **kwargs: Any) -> Any:
                started = time.perf_counter()  # on the database thread: one at a time
                try:
                    return fn(*args, **kwargs)
                finally:
                    self.busy += time.perf_counter() - started

            hop = real(run)

            async def call(*args: Any, **kwargs: Any) -> Any:
                asked = time.perf_counter()
                try:
                    return await hop(*args, **kwargs)
                finally:
                    self.hops.append(time.perf_counter() - asked)

            return call

        return db
