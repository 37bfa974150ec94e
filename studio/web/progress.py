"""How far a batch got, in a person's words: outcome groups, plain state labels, summaries.

The engine counts tasks by state; a family wants to know how many images are ready,
how many are still coming, and what went wrong. The groups here are what the pages
show, each with a word and a colour that is never the only sign.
"""

import re
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Count, Q
from django.utils import timezone

from studio import phrases
from studio.clock import how_long
from studio.engine import adoption, retry_at
from studio.models import (
    RECONCILABLE,
    STOPPABLE,
    Task,
    TaskState,
)
from studio.phrases import (
    AUTH_PHASE,
    BUSY,
    GONE_PHASE,
    MAY_HAVE_REACHED,
    NO_ROW_PHASE,
    RECONCILE_PHASE,
    REFERENCE_CHANGED,
    RETRIES_ITSELF,
    UNREACHABLE,
)

# The outcome groups, in the order the bar shows them: (key, states). An image saved whose
# history Ember has yet to write is shown, downloaded and chosen like a ready one; only its
# publishing waits for an operator. It is counted apart: among "need attention" it read
# "0 of 7 ready, 7 need attention" beside five results on the same page (a review).
SAVED = (TaskState.HISTORY_MISSING,)
GROUPS: tuple[tuple[str, tuple[TaskState, ...]], ...] = (
    ("ready", (TaskState.DONE,)),
    ("saved", SAVED),
    ("running", (*STOPPABLE,)),
    ("attention", tuple(state for state in RECONCILABLE if state not in SAVED)),
    ("failed", (TaskState.FAILED,)),
    ("cancelled", (TaskState.CANCELLED,)),
)
# The order the bar and the words show the groups in: "checking" is the part of
# "attention" the worker looks into by itself (`checked_itself`), counted apart.
ORDER = ("ready", "saved", "running", "checking", "attention", "failed", "cancelled")
# How the summary says a group: (one, several).
WORDS = {
    "ready": ("ready", "ready"),
    "saved": ("saved, waiting for Ember's record", "saved, waiting for Ember's record"),
    "running": ("in progress", "in progress"),
    "checking": ("being checked with Ember", "being checked with Ember"),
    "attention": ("needs attention", "need attention"),
    "failed": ("failed", "failed"),
    "cancelled": ("cancelled", "cancelled"),
}

# Every state in plain words: what a person sees instead of the state's name.
STATE_LABELS = {
    TaskState.QUEUED: "Waiting to start",
    TaskState.PREPARING: "Preparing",
    TaskState.SUBMITTING: "Sending to Ember",
    TaskState.RUNNING: "Ember is making it",
    TaskState.COPYING: "Saving the image",
    TaskState.DONE: "Ready",
    TaskState.FAILED: "Failed",
    TaskState.CANCELLED: "Cancelled",
    TaskState.UNCERTAIN: "Needs an operator: Ember may have received this",
    TaskState.HISTORY_MISSING: "Image saved, waiting for Ember's record",
    TaskState.COPY_FAILED: "Made by Ember, not saved here yet",
}
# What happens next to a task that waits for a person, in one sentence.
NEXT_STEPS = {
    TaskState.UNCERTAIN: (
        "An operator checks with Ember before anything is sent again, so it is not paid twice."
    ),
    TaskState.HISTORY_MISSING: (
        "The image is kept; an operator recovers Ember's record before it can be published."
    ),
    TaskState.COPY_FAILED: (
        "An operator copies the finished image from Ember; it is not made or paid again."
    ),
}
# An image whose submit's answer was lost, which the worker looks up in Ember's history by
# itself (engine/adoption.py) and nothing found yet needs a person: a browser review read
# "needs an operator" and "Repair in admin" (a paid resubmit behind a tick box) for tasks
# the worker adopted five minutes later, paying nothing again.
SELF_CHECKED = (RECONCILE_PHASE, NO_ROW_PHASE)
CHECKING_LABEL = "Checking with Ember: it may have received this"
# Said as a period, not a countdown: a search that finds nothing new leaves the row as it
# was, and a row's words are drawn again only when it changes.
CHECKING_NEXT = (
    "Avatars looks in Ember's history for it by itself, every {every}: if Ember has it, it "
    "is saved here and not paid again. Nothing to do yet."
)
# A job Ember took and ended failed: it may have been charged, and nothing sends it again.
FAILED_AT_EMBER = (
    "Ember took this job and it failed there, so it may have been paid for. Nothing sends it "
    "again by itself: a new batch asks for it again, paid again."
)
# A copy Ember's file route answered 404: nothing is left there to copy.
GONE_NEXT_STEP = (
    "Ember says it no longer has this image, so it cannot be saved here. An operator can "
    "check with Ember; a new batch would make another, paid again."
)
# A task stopped before its send because a reference photo changed on disk.
REPAIRED_NEXT_STEP = (
    "Nothing was sent or paid for. Once an operator repairs the reference photo, they can "
    "queue it again."
)
DASH = "\u2013"  # an en dash between the progress and the title in the tab
# "(RemoteProtocolError)": an exception's class name, for the admin, not for the person.
CLASS_NAME = re.compile(r"\s*\((?:[A-Z][a-z0-9]+){2,}\)")


# Sent again, from the start: an error left from the try before is no longer what happens
# (a review saw "Sending to Ember" beside "Ember is busy; retry later").
TRIED_AFRESH = (TaskState.PREPARING, TaskState.SUBMITTING)


def reason(task: Task, *, shown_phase: bool) -> str:
    """Return the error a task's row shows, "" when the phase shown says it already.

    A poll that cannot reach Ember sets both: "Ember could not be reached; still polling"
    and "Ember could not be reached." read one after the other (a review).
    """
    error = plain_error(task.error)
    if task.state in TRIED_AFRESH:
        return ""
    if task.state == TaskState.QUEUED and task.phase.endswith(RETRIES_ITSELF):
        return ""
    if task.state == TaskState.UNCERTAIN and error.startswith(MAY_HAVE_REACHED):
        return ""  # "Check history before submitting again" is the operator's step (a review)
    if shown_phase and error and task.phase.startswith(error.rstrip(".")):
        return ""
    return error


def plain_error(error: str) -> str:
    """Return a task's error without the exception class names kept for operators."""
    return CLASS_NAME.sub("", error).strip()


def group_counts() -> dict[str, Count]:
    """Return the annotations that count a batch's tasks per outcome group."""
    return {f"n_{key}": Count("tasks", filter=Q(tasks__state__in=states)) for key, states in GROUPS}


@dataclass(frozen=True)
class Outcome:
    """A batch's tasks counted per outcome group, with the words and numbers pages show."""

    ready: int = 0
    saved: int = 0
    running: int = 0
    attention: int = 0
    failed: int = 0
    cancelled: int = 0
    checking: int = 0  # of the uncertain ones counted in `attention` by state: see ORDER

    def checked(self, checking: int) -> "Outcome":
        """Return this outcome with `checking` of its "attention" tasks counted apart."""
        return replace(self, attention=self.attention - checking, checking=checking)

    @classmethod
    def of_counts(cls, counts: dict[str, int]) -> "Outcome":
        """Build from counts by state (as `engine.progress` answers)."""
        return cls(**{key: sum(counts.get(s.value, 0) for s in states) for key, states in GROUPS})

    @classmethod
    def of_row(cls, row: Any) -> "Outcome":
        """Build from a batch annotated with `group_counts()`."""
        return cls(**{key: getattr(row, f"n_{key}") for key, _ in GROUPS})

    @property
    def total(self) -> int:
        return sum(getattr(self, key) for key in ORDER)

    @property
    def operator(self) -> int:
        """Count the tasks only an operator moves on: saved ones among them."""
        return self.attention + self.saved

    @property
    def done(self) -> bool:
        """Say whether nothing more will happen without a person: every task rests."""
        return self.running == 0 and self.operator == 0 and self.checking == 0

    def words(self) -> str:
        """Say the outcome as "3 ready · 1 failed"; every group with tasks, in bar order."""
        parts = []
        for key in ORDER:
            n = getattr(self, key)
            if n:
                one, several = WORDS[key]
                parts.append(f"{n} {one if n == 1 else several}")
        return " · ".join(parts) or "No tasks"

    def segments(self) -> list[dict[str, Any]]:
        """Return the bar's segments with tasks: key, count, width in percent and words."""
        total = self.total or 1
        return [
            {
                "key": key,
                "n": getattr(self, key),
                "width": round(100 * getattr(self, key) / total, 2),
                "words": f"{getattr(self, key)} {WORDS[key][0 if getattr(self, key) == 1 else 1]}",
            }
            for key in ORDER
            if getattr(self, key)
        ]

    def tab_title(self, title: str) -> str:
        """Say progress in the browser tab before the title: "3 of 8 ready", "3 of 8 ready,
        2 saved, 1 needs attention" once only a person can move it on, or once the batch
        rests "All done" ("None ready" when every task was cancelled or failed)."""
        if self.done and self.total and not self.ready:
            return f"None ready {DASH} {title}"
        if self.done:
            return f"All done {DASH} {title}"
        if not self.running:  # nothing moves until a person does: say so, not only the count
            one, several = WORDS["attention"]
            waiting = [f"{self.saved} saved"] if self.saved else []
            if self.checking:
                waiting.append(f"{self.checking} {WORDS['checking'][0]}")
            if self.attention:
                waiting.append(f"{self.attention} {one if self.attention == 1 else several}")
            return f"{self.ready} of {self.total} ready, {', '.join(waiting)} {DASH} {title}"
        return f"{self.ready} of {self.total} ready {DASH} {title}"


def cancel_offer(tasks: list[Task], outcome: Outcome) -> str:
    """Say what a batch's cancel area offers (`tasks` as `dress` left them).

    "cancel" while some task may still be cancelled; "kept" while the rest is with Ember,
    whose work a cancel would only keep; "" once nothing moves without a person.
    """
    if any(task.stoppable for task in tasks):  # type: ignore[attr-defined]
        return "cancel"
    return "kept" if outcome.running else ""


def next_step(task: Task) -> str:
    """Say what happens next to a task that waits for a person ("" for the others)."""
    if task.state == TaskState.COPY_FAILED and task.phase == GONE_PHASE:
        return GONE_NEXT_STEP
    if task.state == TaskState.FAILED and task.error == REFERENCE_CHANGED:
        return REPAIRED_NEXT_STEP
    if task.state == TaskState.FAILED and task.ember_job_id:
        return FAILED_AT_EMBER
    return NEXT_STEPS.get(TaskState(task.state), "")


# What a task the worker will send in its turn waits for, as the batch page says it now.
TURN_WORDS = {
    "worker": phrases.QUEUED_PHASE,  # no worker running: nothing moves until one does
    "ember": "Waiting for Ember",  # short: a second line on a phone moved the page
    "turn": "Waiting its turn",  # the worker's slots are taken by the tasks before it
}


def turn_words(tasks: list[Task], *, worker_running: bool, away: bool) -> str:
    """Give each queued task whose phase is the worker's plain "wait for your turn" the
    words of the moment (`turn`), and return which words they are (a `TURN_WORDS` key).

    Found by a review: with Ember away mid-batch, such rows said "Waiting for the worker"
    under "Worker running"; the phase stays as the worker wrote it, for the API and admin.
    """
    key = "worker" if not worker_running else "ember" if away else "turn"
    for task in tasks:
        waits = task.state == TaskState.QUEUED and task.phase == phrases.QUEUED_PHASE
        task.turn = TURN_WORDS[key] if waits and task.show_phase else ""  # type: ignore[attr-defined]
    return key


def ember_away(tasks: list[Task]) -> bool:
    """Say whether the last request of a task still under way could not reach Ember."""
    return any(t.state in STOPPABLE and t.phase.startswith(UNREACHABLE) for t in tasks)


def token_refused(tasks: list[Task]) -> bool:
    """Say whether a task waits because Ember refused Avatars' credentials (EMBER_TOKEN)."""
    return any(t.state in STOPPABLE and t.phase.startswith(AUTH_PHASE) for t in tasks)


def ember_busy(tasks: list[Task]) -> bool:
    """Say whether a task waits to be sent because Ember said it was busy (429/503)."""
    return any(t.state == TaskState.QUEUED and t.phase.startswith(BUSY) for t in tasks)


def next_try(task: Task, now: datetime) -> str:
    """Say how long a queued task still waits out a back-off ("next try in 35 s"), else "".

    Worked out as the row is drawn, from `next_attempt_at`: a figure stored in the phase
    ("trying again in 40 s") still said 40 s when the try was long past. Once due, the
    row names no figure; the phase says why the task waits.
    """
    due = retry_at(task, now)
    return "" if due is None else f"next try in {how_long(now, due)}"


def checked_itself(tasks: "Any") -> set[str]:
    """Return the ids of those of `tasks` (a queryset) the worker looks up in Ember's history
    by itself; none while the searches are off."""
    if settings.AVATARS_ADOPT_PER_MINUTE <= 0:
        return set()
    lost = adoption.lost_submits().filter(pk__in=tasks.values("pk"), phase__in=SELF_CHECKED)
    return {str(pk) for pk in lost.values_list("pk", flat=True)}


def may_come(task: Task, checking: set[str]) -> bool:
    """Say whether a task's image may still come without a person: it is under way, or the
    worker checks with Ember for it by itself (`checking`, as `checked_itself` answers).
    The results keep each such task a place."""
    return task.state in STOPPABLE or str(task.pk) in checking


def _checking_next() -> str:
    now = timezone.now()
    every = how_long(now, now + timedelta(seconds=settings.AVATARS_ADOPT_EVERY))
    return CHECKING_NEXT.format(every=every)


def dress(tasks: list[Task], checking: set[str] | None = None) -> list[Task]:
    """Give each task the words its row shows: label, reason, next step, and if it may stop.

    `checking`: the tasks the worker looks up in Ember's history by itself (`checked_itself`).
    """
    now = timezone.now()
    checking = checking or set()
    for task in tasks:
        state = TaskState(task.state)
        task.label = STATE_LABELS[state]  # type: ignore[attr-defined]
        task.next_step = next_step(task)  # type: ignore[attr-defined]
        looked_up = str(task.pk) in checking
        if looked_up:
            task.label, task.next_step = CHECKING_LABEL, _checking_next()  # type: ignore[attr-defined]
        # Engineers' phases ("Reconcile before retry") give way to the next step above.
        task.show_phase = state in STOPPABLE  # type: ignore[attr-defined]
        task.reason = reason(task, shown_phase=task.show_phase)  # type: ignore[attr-defined]
        task.next_try = next_try(task, now)  # type: ignore[attr-defined]
        # Cancel only where it can: a task with Ember is kept (found by a review: a
        # "Cancel" beside "Ember is making it" only ever answered that it was kept).
        # Nor a clip sent under its key, which waits to be sent again under it (a review).
        task.stoppable = task.cancellable()  # type: ignore[attr-defined]
        group = next(key for key, states in GROUPS if state in states)
        task.group = "checking" if looked_up else group  # type: ignore[attr-defined]
    return tasks
