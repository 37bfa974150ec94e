"""The services' refusals and the fixed sentences they say them with.

The sentences are part of the contract (the pages, the API and the admin show them as
they are): change one only together with everything that quotes it.
"""

from studio.models import Batch

PUBLISH_REFUSED = "Ember history must be recovered before publishing generated images."
TOO_LATE = "This task has already been sent to Ember; the work is kept."
ALREADY_ENDED = "This task has already ended; there is nothing to cancel."
RESUBMIT_WITHDRAWN = (
    "The resubmit was withdrawn before it was sent. An earlier attempt may still be with "
    "Ember: reconcile before retry."
)
SET_PUBLISHED = "This set is published; its choice can no longer change."
SET_PUBLISHED_NAME = (
    "This set is published and sibling apps read it by its name and id; it can no longer be "
    "renamed or deleted."
)
SET_KEPT_CHANGING = "This set kept changing while it was being published; publish it again."
SET_EMPTY = "Publishing waits until the set holds at least one image."
SET_CHANGED = "This set changed since it was shown: look at it again before publishing it."
RELEASE_NOT_UNCONFIRMED = (
    "Only a done or history_missing task whose release Ember did not confirm is asked again."
)
# Said of a release Ember did not confirm: it may have applied it all the same (docs/ember.md).
RELEASE_ORIGINAL_BAD = (
    "The original is missing or fails its checksum: repair it now (check_originals "
    "--repair). Ember may already have let go of its copy, and may remove it any time."
)
KEY_REUSED = "This key already planned a batch from a different request."
RESUBMIT_WARNING = "Resubmitting may pay for a second generation: Ember may already have this job."
RESUBMIT_TOO_EARLY = (
    "Ember may still be working on the last submit. Wait until the poll bound has passed "
    "since it was sent, or confirm that you checked Ember and it did not receive this."
)
RESUBMIT_STALE = (
    "This task has changed since the confirmation was shown (another send or another "
    "person's action); nothing was sent. Look at it again before resubmitting."
)
REQUEUE_NOT_FAILED = "Only a failed task can be queued again."
REQUEUE_WAS_SENT = (
    "Ember took a job for this task, so queuing it again would pay a second time; a new "
    "batch is the way to ask for it again."
)
REQUEUE_REFERENCE_BAD = (
    "A reference photo of this task still fails its checksum; repair it first "
    "(check_originals --repair)."
)
SPEND_WINDOW_HOURS = 24  # the daily cap counts the tasks planned in this many hours


class InvalidRequest(ValueError):
    """A request that cannot be planned; the message says why, for people.

    `field` names the part of the request at fault ("providers" or "references"; empty
    for the request as a whole) and `provider` the provider, so that a form can show the
    message beside what caused it.
    """

    def __init__(self, message: str, *, field: str = "", provider: str = "") -> None:
        super().__init__(message)
        self.field = field
        self.provider = provider


class SpendCapReached(InvalidRequest):
    """The batch would take its user past the daily cap on paid tasks; the numbers say how,
    and `retry_after` how many seconds until enough of them leave the window for it to fit
    (None: it never fits, being larger than the cap)."""

    def __init__(self, *, planned: int, more: int, limit: int, retry_after: int | None) -> None:
        super().__init__(
            f"You have planned {planned} paid tasks in the last {SPEND_WINDOW_HOURS} hours; "
            f"this batch would make {more} more and the daily limit is {limit}. "
            + _when_it_fits(more, limit, retry_after)
        )
        self.planned = planned
        self.more = more
        self.limit = limit
        self.retry_after = retry_after


def _when_it_fits(more: int, limit: int, retry_after: int | None) -> str:
    """Say when a batch refused by the daily cap would be planned, or that it never would."""
    if retry_after is None:
        return f"A batch of {more} tasks is larger than the limit: plan fewer at a time."
    minutes = -(-retry_after // 60)  # rounded up: asking again then is never too early
    wait = f"{minutes} minutes" if minutes < 120 else f"{-(-minutes // 60)} hours"
    return f"It fits in about {wait}, when earlier tasks leave the window."


class RepeatedBatch(Exception):
    """The person planned the same intent as `batch` minutes ago: ask before paying again."""

    def __init__(self, batch: Batch) -> None:
        super().__init__(f"The same batch was planned at {batch.created_at:%H:%M}.")
        self.batch = batch


class KeyReused(Exception):
    """The idempotency key already planned a batch from another request: `batch`."""

    def __init__(self, batch: Batch) -> None:
        super().__init__(KEY_REUSED)
        self.batch = batch


class StorageRefused(Exception):
    """The disk (or the database's) would not take an upload: full, read-only, over quota."""

    PHOTOS = "the disk Avatars stores photos on"
    DATABASE = "the disk Avatars keeps its database on"

    def __init__(self, cause: str, disk: str = PHOTOS) -> None:
        super().__init__(
            f"The photo was not kept: {disk} refused it ({cause}). "
            "Try again once an operator has seen to that disk."
        )


class TooLate(Exception):
    """The task already reached Ember (or finished): it cannot be cancelled."""


class PublishRefused(Exception):
    """The set cannot be published (yet); the message says why, for people."""

    def __init__(self, message: str = PUBLISH_REFUSED) -> None:
        super().__init__(message)


class ReleaseRefused(Exception):
    """Ember is not asked again to let go of a task's copy; the message says why."""


class ResubmitRefused(Exception):
    """The resubmit is not allowed (yet); the message says why."""


class RequeueRefused(Exception):
    """The failed task cannot be queued again (yet); the message says why."""
