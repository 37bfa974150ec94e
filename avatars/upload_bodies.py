"""How many upload bodies one web process receives at once (`AVATARS_UPLOAD_BODIES_AT_ONCE`).

Django's ASGI handler reads a whole body before any view runs, and keeps one past 2.5 MB
in a temporary file that no listing shows (deleted as it is made). Uploads take turns to
be parsed and stored (`studio.uploads.UploadTurns`), but their bodies arrived meanwhile:
a review sent thirty 21.7 MB uploads at once from one token and the process held 651 MB
of them. Here, an upload (a multipart POST from a signed-in person or a valid token) is
let in to be read only while fewer than this many are (a body from someone not signed
in, a few KB read within seconds, takes no place: a trickle of them would keep every
place); the others wait unread, their bytes left with the sender (the server stops
reading a connection whose body is not asked for), and one not let in within
`AVATARS_BODY_IDLE_SECONDS` is answered 503 with `Retry-After`. So the temporary files
hold at most this many bodies.

One person holds at most `AVATARS_UPLOAD_BODIES_A_PERSON` of the places: a review's member
trickled eight uploads at the slowest rate allowed (12 KB/s, 43 minutes each) and every
other person's photo waited, then was told to come back. Their next upload waits for one
of their own places first, then for a place, within the same idle limit.
"""

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator
from typing import Any

from django.conf import settings

RETRY_AFTER = 5  # seconds: when an upload not let in may be sent again
BUSY = (
    "Avatars is receiving as many photos as it takes at once; nothing was uploaded. "
    f"Send it again in {RETRY_AFTER} seconds."
)

# One per event loop: a semaphore belongs to the loop it first waited in.
_turns: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore]" = (
    weakref.WeakKeyDictionary()
)
# Each person's own places, by event loop, while they hold or wait for one: [places, users].
_shares: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, list[Any]]]" = (
    weakref.WeakKeyDictionary()
)


@contextlib.asynccontextmanager
async def admitted(person: str) -> AsyncIterator[bool]:
    """Hold a place for one upload body of `person` while it is received and served; yield
    whether one was had within `AVATARS_BODY_IDLE_SECONDS` (False: answer busy, read nothing).
    """
    loop = asyncio.get_running_loop()
    turns = _turns.get(loop)
    if turns is None:
        turns = _turns[loop] = asyncio.Semaphore(settings.AVATARS_UPLOAD_BODIES_AT_ONCE)
    async with _share(loop, person) as share:
        try:
            async with asyncio.timeout(settings.AVATARS_BODY_IDLE_SECONDS):
                await share.acquire()
                try:
                    await turns.acquire()
                except BaseException:  # the idle limit passed meanwhile
                    share.release()
                    raise
        except TimeoutError:
            yield False
            return
        try:
            yield True
        finally:
            turns.release()
            share.release()


@contextlib.asynccontextmanager
async def _share(loop: asyncio.AbstractEventLoop, person: str) -> AsyncIterator[asyncio.Semaphore]:
    """Lend `person`'s own places while they are used; forget them when nobody uses them."""
    shares = _shares.setdefault(loop, {})
    share = shares.setdefault(
        person, [asyncio.Semaphore(settings.AVATARS_UPLOAD_BODIES_A_PERSON), 0]
    )
    share[1] += 1
    try:
        yield share[0]
    finally:
        share[1] -= 1
        if not share[1]:
            del shares[person]
