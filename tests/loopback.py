"""A socketserver served on loopback in a thread of its own, for the Ember client's tests."""

import socketserver
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TypeVar

S = TypeVar("S", bound=socketserver.BaseServer)


@contextmanager
def serving(server: S) -> Iterator[S]:
    """Serve `server` until the block ends, then shut it down and close its socket."""
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
