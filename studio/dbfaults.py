"""What a database error says about the database itself, by its codes, not its words.

Two questions, asked of Django's errors by the driver's error under them (SQLite's
result code, PostgreSQL's SQLSTATE): is the database out of reach altogether (every
request fails; avatars/outage.py answers 503), and did its disk refuse a write (an
upload is then refused as the disk's doing, not the photo's). A query's own fault
(a missing table, a syntax error, SQLite's LOCKED inside one connection) is neither.
"""

import sqlite3

import psycopg
from django.db import DatabaseError, InterfaceError

# SQLite's result codes for a database it cannot open, read or write, whatever the query.
# (Not LOCKED: a conflict inside one connection, a fault of the code.) PROTOCOL: another
# process holding the write-ahead log's locks past SQLite's retries (a review's).
SQLITE_UNUSABLE = frozenset(
    {"CANTOPEN", "IOERR", "FULL", "READONLY", "BUSY", "NOTADB", "CORRUPT", "PERM", "PROTOCOL"}
)
# PostgreSQL's classes of the same: connection, resources (a full disk), operator
# intervention (a shutdown), system (an I/O error).
POSTGRESQL_UNUSABLE = frozenset({"08", "53", "57", "58"})
# A disk that will not take a write: full, read-only, failing.
SQLITE_DISK_REFUSED = frozenset({"FULL", "READONLY", "IOERR"})
POSTGRESQL_DISK_REFUSED = frozenset({"53100", "25006", "58030"})  # disk full, read-only, I/O


def unusable(exc: BaseException | None) -> bool:
    """Say whether `exc` is the database being out of reach rather than a query's fault."""
    if not isinstance(exc, DatabaseError | InterfaceError):
        return False
    cause = exc.__cause__
    if isinstance(cause, sqlite3.Error):  # "file is not a database" is no OperationalError
        return _sqlite_code(cause) in SQLITE_UNUSABLE
    if isinstance(cause, psycopg.OperationalError):
        sqlstate = cause.sqlstate
        # None: the connection itself failed or was lost, before the server said anything.
        return sqlstate is None or sqlstate[:2] in POSTGRESQL_UNUSABLE
    # A connection the server closed, used again; not a cursor closed by the code.
    return isinstance(cause, psycopg.InterfaceError) and "connection" in str(cause)


def disk_refused(exc: BaseException | None) -> bool:
    """Say whether `exc` is the database's disk refusing a write: full, read-only, failing."""
    if not isinstance(exc, DatabaseError):
        return False
    cause = exc.__cause__
    if isinstance(cause, sqlite3.Error):
        return _sqlite_code(cause) in SQLITE_DISK_REFUSED
    return isinstance(cause, psycopg.Error) and cause.sqlstate in POSTGRESQL_DISK_REFUSED


def _sqlite_code(error: sqlite3.Error) -> str:
    """Return the primary result code's name ("FULL" for SQLITE_FULL, "IOERR" for its kinds)."""
    name = getattr(error, "sqlite_errorname", "") or ""
    return name.removeprefix("SQLITE_").split("_")[0]


def said(exc: BaseException) -> str:
    """Say, for the log, that the database cannot be used, in its own words, on one line."""
    words = " ".join(str(exc).split()).rstrip(".") or type(exc).__name__
    return f"the database cannot be used ({words})"
