"""Filters for the log: what an operator reads, one line where a line says it all."""

import logging


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
