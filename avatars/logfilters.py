"""Filters for the log: what an operator reads, one line where a line says it all."""

import logging

from studio import dbfaults


class WithoutTraceback(logging.Filter):
    """Keep a record's message and drop its traceback.

    A request for a host this server does not serve is a client's mistake, said in full by
    its message; its traceback (thirty lines of Django's request handling) once filled the
    web log for every such request (a review's).
    """

    def filter(self, record: logging.LogRecord) -> bool:
        record.exc_info = None
        record.exc_text = None
        return True


class DatabaseOutage(logging.Filter):
    """Say a request failed for a database out of reach in one line, with the database's words.

    A read-only data dir had every request log two tracebacks of 130 lines each (a review's):
    the cause is the same for all of them, and its one line is what an operator acts on.
    Any other error keeps its traceback.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and dbfaults.unusable(exc):
            record.msg = f"{record.getMessage()}: {dbfaults.said(exc)}"
            record.args = None
            record.exc_info = None
            record.exc_text = None
        return True
