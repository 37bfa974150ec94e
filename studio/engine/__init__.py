"""Services that touch several models, the store or Ember: generate, cancel, reconcile, publish.

Views, API routes, admin actions and commands call these (`engine.generate(...)`); they
never change task state themselves. One module per concern:

- `errors`: the refusals and the fixed sentences they say them with;
- `library`: subjects and their reference photos;
- `validation` and `planning`: reading a request, and writing its batch (docs/design.md §5);
- `cancel`: cancelling while nothing may be with Ember (docs/design.md §9);
- `recovery`: reconcile and resubmit, a person's ways out of `uncertain` (docs/design.md §8),
  and `lost_sends`, a done task's earlier send not looked for, which a reconcile looks up;
- `requeue`: queuing again a failed task nothing was paid for, after a repair;
- `adoption`: the worker's own bounded search of Ember's history for lost image submits;
- `sets`: choosing assets and publishing (docs/design.md §10).

Callers use the names below; a test that replaces a helper patches it in its own module,
where the services look it up.
"""

from studio.engine.adoption import adopt_due
from studio.engine.cancel import BatchCancel, cancel_batch, cancel_task
from studio.engine.errors import (
    ALREADY_ENDED,
    KEY_REUSED,
    PUBLISH_REFUSED,
    RELEASE_NOT_UNCONFIRMED,
    RELEASE_ORIGINAL_BAD,
    REQUEUE_NOT_FAILED,
    REQUEUE_REFERENCE_BAD,
    REQUEUE_WAS_SENT,
    RESUBMIT_STALE,
    RESUBMIT_TOO_EARLY,
    RESUBMIT_WARNING,
    RESUBMIT_WITHDRAWN,
    SET_CHANGED,
    SET_EMPTY,
    SET_KEPT_CHANGING,
    SET_PUBLISHED,
    SET_PUBLISHED_NAME,
    SPEND_WINDOW_HOURS,
    TOO_LATE,
    InvalidRequest,
    KeyReused,
    PublishRefused,
    ReleaseRefused,
    RepeatedBatch,
    RequeueRefused,
    ResubmitRefused,
    SpendCapReached,
    StorageRefused,
    TooLate,
)
from studio.engine.library import add_reference, create_subject
from studio.engine.lost_sends import lost_sends
from studio.engine.planning import (
    canonical_sha256,
    counted_tasks,
    generate,
    jobs_left_today,
    planned_by,
    progress,
    progress_of,
    recent_twin,
    retry_at,
    same_intent,
)
from studio.engine.recovery import areconcile, reconcile, resubmit
from studio.engine.releasing import RELEASABLE, release_again
from studio.engine.requeue import REQUEUED_PHASE, requeue, was_sent
from studio.engine.sets import (
    PUBLISH_TRIES,
    blocking,
    change_choice,
    choose_assets,
    create_set,
    delete_set,
    lost_originals,
    publish,
    reference_photos,
    rename_set,
    set_name,
)
from studio.engine.validation import FRAMES, MAX_CANDIDATES, MAX_PROMPT, echo

__all__ = [
    "ALREADY_ENDED",
    "FRAMES",
    "KEY_REUSED",
    "MAX_CANDIDATES",
    "MAX_PROMPT",
    "PUBLISH_REFUSED",
    "PUBLISH_TRIES",
    "RELEASABLE",
    "RELEASE_NOT_UNCONFIRMED",
    "RELEASE_ORIGINAL_BAD",
    "REQUEUED_PHASE",
    "REQUEUE_NOT_FAILED",
    "REQUEUE_REFERENCE_BAD",
    "REQUEUE_WAS_SENT",
    "RESUBMIT_STALE",
    "RESUBMIT_TOO_EARLY",
    "RESUBMIT_WARNING",
    "RESUBMIT_WITHDRAWN",
    "SET_CHANGED",
    "SET_EMPTY",
    "SET_KEPT_CHANGING",
    "SET_PUBLISHED",
    "SET_PUBLISHED_NAME",
    "SPEND_WINDOW_HOURS",
    "TOO_LATE",
    "BatchCancel",
    "InvalidRequest",
    "KeyReused",
    "PublishRefused",
    "ReleaseRefused",
    "RepeatedBatch",
    "RequeueRefused",
    "ResubmitRefused",
    "SpendCapReached",
    "StorageRefused",
    "TooLate",
    "add_reference",
    "adopt_due",
    "areconcile",
    "blocking",
    "cancel_batch",
    "cancel_task",
    "canonical_sha256",
    "change_choice",
    "choose_assets",
    "counted_tasks",
    "create_set",
    "create_subject",
    "delete_set",
    "echo",
    "generate",
    "jobs_left_today",
    "lost_originals",
    "lost_sends",
    "planned_by",
    "progress",
    "progress_of",
    "publish",
    "recent_twin",
    "reconcile",
    "reference_photos",
    "release_again",
    "rename_set",
    "requeue",
    "resubmit",
    "retry_at",
    "same_intent",
    "set_name",
    "was_sent",
]
