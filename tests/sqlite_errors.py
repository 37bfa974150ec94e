"""SQLite's own errors, raised by real connections and wrapped as Django's SQLite backend
wraps them (whatever database the suite runs on): what the database's faults look like."""

import sqlite3
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

from django.db import DatabaseError
from django.db.utils import DatabaseErrorWrapper


def wrapped(call: Callable[[], object]) -> BaseException:
    """Run `call`, which fails in SQLite, and return the error as Django raises it."""
    sqlite_backend = SimpleNamespace(Database=sqlite3, errors_occurred=False)
    try:
        with DatabaseErrorWrapper(sqlite_backend):
            call()
    except DatabaseError as exc:
        return exc
    raise AssertionError("the call did not fail")


def sqlite_error(tmp_path: Path, how: str) -> BaseException:
    """Return the error SQLite raises when its database is as `how` says."""
    database = tmp_path / "db.sqlite3"
    sqlite3.connect(database).execute("create table t (x)").connection.commit()
    if how == "cannot open":  # a folder where the file should be
        return wrapped(lambda: sqlite3.connect(tmp_path).execute("select 1"))
    if how == "read-only":
        read_only = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
        return wrapped(lambda: read_only.execute("insert into t values (1)"))
    if how == "full":  # a database that may not grow past its pages: SQLITE_FULL
        full = sqlite3.connect(database)
        full.execute(f"pragma max_page_count = {full.execute('pragma page_count').fetchone()[0]}")
        return wrapped(lambda: full.execute("insert into t values (?)", (b"x" * 100_000,)))
    if how == "locked":
        holder = sqlite3.connect(database, isolation_level=None)
        holder.execute("begin exclusive")
        waiter = sqlite3.connect(database, timeout=0)
        return wrapped(lambda: waiter.execute("select * from t"))
    if how == "not a database":
        junk = tmp_path / "junk.sqlite3"
        junk.write_bytes(b"not a database, whatever its name says" * 100)
        return wrapped(lambda: sqlite3.connect(junk).execute("select * from sqlite_master"))
    if how == "no such table":
        return wrapped(lambda: sqlite3.connect(database).execute("select * from missing"))
    raise AssertionError(how)
