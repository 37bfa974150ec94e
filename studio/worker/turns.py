"""Whose call the worker's database thread takes next (docs/design.md §6.4).

Jobs started together end together, and every one of them then needs the one
database thread several times over (copying, the asset row, done, and the next
task's preparing, submitting, running). Served first come, first served, the
coroutines advance in step and all finish late; the next round's jobs then start
together again, and so on for ever. So each piece of work carries a *turn*: when it
began (a job seen ended, a slot's refill) and a number that breaks ties. The gate
lets the oldest turn go first: one task goes through its writes while the others
wait, a round's jobs start spread out, and they end spread out.

A coroutine's turn is a context variable (`TURN`): every call it makes carries it.
The gate (`Gate`) is the worker's, set for its run (`GATE`); without one (a call
outside a worker's run) a call goes straight to the thread.
"""

import asyncio
import heapq
import itertools
import time
from contextvars import ContextVar

Turn = tuple[float, int]  # (time.monotonic() the work began, a number breaking ties)

WIDTH = 1  # calls handed to the thread at once (2, one ready behind the one running: no faster)

_numbers = itertools.count()
TURN: ContextVar[Turn | None] = ContextVar("turn", default=None)


def new_turn() -> Turn:
    """Return a turn for work beginning now: after every turn taken before."""
    return (time.monotonic(), next(_numbers))


class Gate:
    """Let at most `width` calls through at once, the waiting one with the oldest turn first."""

    def __init__(self, width: int = WIDTH) -> None:
        self.width = width
        self.inside = 0
        self._waiting: list[tuple[Turn, int, asyncio.Future[None]]] = []

    async def enter(self) -> None:
        """Wait until this coroutine's turn (`TURN`, else now) comes; then it is inside."""
        if self.inside < self.width and not self._waiting:
            self.inside += 1
            return
        future = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiting, (TURN.get() or new_turn(), next(_numbers), future))
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.leave()  # let in just as it was cancelled: the place goes to the next
            raise

    def leave(self) -> None:
        """Give the place to the oldest turn waiting, if any (a cancelled wait is skipped)."""
        while self._waiting:
            future = heapq.heappop(self._waiting)[2]
            if not future.done():
                future.set_result(None)
                return
        self.inside -= 1


GATE: ContextVar[Gate | None] = ContextVar("gate", default=None)
