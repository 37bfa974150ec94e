"""The data model (docs/design.md §3): subjects, originals, batches, tasks, attempts, sets.

Every model carries `version`, bumped on every write through `studio.store.update`,
so that a writer can say "only if nobody moved this row since I read it".
"""

import uuid
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from studio import worker_seen

if TYPE_CHECKING:
    from studio.originals import Original


class TaskState(models.TextChoices):
    QUEUED = "queued"
    PREPARING = "preparing"
    SUBMITTING = "submitting"
    RUNNING = "running"
    COPYING = "copying"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"
    UNCERTAIN = "uncertain"
    HISTORY_MISSING = "history_missing"
    COPY_FAILED = "copy_failed"


# What the worker picks up.
ACTIVE = (TaskState.QUEUED, TaskState.RUNNING, TaskState.COPYING)
# What the worker must never resubmit on its own: a person or reconcile decides.
RECONCILABLE = (TaskState.UNCERTAIN, TaskState.HISTORY_MISSING, TaskState.COPY_FAILED)
# Where a task rests for good unless a person repairs it.
FINAL = (TaskState.DONE, TaskState.FAILED, TaskState.CANCELLED)
# Nothing has been sent to Ember for this intent in these states (docs/design.md §9).
CANCELLABLE = (TaskState.QUEUED, TaskState.PREPARING)
# What a person may ask to stop: cancel answers for those already with Ember.
STOPPABLE = (*ACTIVE, TaskState.PREPARING, TaskState.SUBMITTING)

# Seconds after a submit during which the worker keeps asking Ember about the job: a
# transport bound, not a verdict on the job. Past it, resubmitting needs no confirmation.
POLL_BOUND = 1800.0


class Kind(models.TextChoices):
    IMAGE = "image"
    CLIP = "clip"


class Origin(models.TextChoices):
    UPLOADED = "uploaded"
    GENERATED = "generated"


class Versioned(models.Model):
    version = models.PositiveIntegerField(default=1)

    class Meta:
        abstract = True


class Subject(Versioned):
    name = models.CharField(max_length=120)
    slug = models.SlugField(max_length=140, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Batch(Versioned):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    title = models.CharField(max_length=200)
    request = models.JSONField()
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name_plural = "batches"

    def __str__(self) -> str:
        return self.title

    def in_form_order(self, tasks: "list[Task]") -> "list[Task]":
        """Return `tasks` as the request listed them: provider rows, then frames, then candidate.

        The form lists providers in the catalogue's order, not by key; a row the request
        no longer names (an older request's shape) goes last.
        """
        listed = self.request.get("providers", [])
        rows = [(p.get("provider"), p.get("model") or "") for p in listed]
        frames = list(self.request.get("frames", []))

        def place(task: Task) -> tuple[int, int, int, str, str]:
            exact = (i for i, row in enumerate(rows) if row == (task.provider, task.model))
            named = (i for i, (name, _) in enumerate(rows) if name == task.provider)
            row = next(exact, next(named, len(rows)))
            frame = frames.index(task.frame) if task.frame in frames else len(frames)
            # Model and id last: the order never ties (the live page compares rows by place).
            return row, frame, task.ordinal, task.model, str(task.pk)

        return sorted(tasks, key=place)


class TaskQuerySet(models.QuerySet["Task"]):
    def active(self) -> "TaskQuerySet":
        return self.filter(state__in=ACTIVE)

    def reconcilable(self) -> "TaskQuerySet":
        return self.filter(state__in=RECONCILABLE)

    def due(self, now: object) -> "TaskQuerySet":
        """Return the active tasks whose next attempt is due, oldest first.

        `next_attempt_at` is set exactly while a task is ACTIVE (a check
        constraint holds that), so `next_attempt_at <= now` alone selects them and
        lets SQLite use the partial index `task_due_idx`: its condition
        `next_attempt_at IS NOT NULL` is implied by the comparison, whereas a
        condition listing the states would not match Django's bound `IN (?, ?, ?)`.
        """
        return self.filter(next_attempt_at__lte=now).order_by("next_attempt_at")


class Task(Versioned):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    batch = models.ForeignKey(Batch, on_delete=models.CASCADE, related_name="tasks")
    kind = models.CharField(max_length=10, choices=Kind.choices, default=Kind.IMAGE)
    state = models.CharField(max_length=20, choices=TaskState.choices, default=TaskState.QUEUED)
    phase = models.CharField(max_length=200, blank=True, default="Waiting for the worker")
    error = models.TextField(blank=True, default="")
    provider = models.CharField(max_length=60)
    provider_label = models.CharField(max_length=120)
    model = models.CharField(max_length=120, blank=True, default="")
    frame = models.CharField(max_length=40)
    ordinal = models.PositiveSmallIntegerField()
    prompt = models.TextField()
    subjects = models.JSONField(default=list)  # subject ids
    references = models.JSONField(default=list)  # frozen: asset id, sha256, file name, mime
    idempotency_key = models.CharField(max_length=64, blank=True, default="")
    ember_job_id = models.CharField(max_length=120, blank=True, default="")
    result = models.JSONField(null=True, blank=True)  # Ember's final answer, saved before the copy
    protection_released = models.BooleanField(null=True, blank=True)
    asset = models.OneToOneField(
        "Asset", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    submitted_at = models.DateTimeField(null=True, blank=True)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = TaskQuerySet.as_manager()

    class Meta:
        ordering = ["batch", "provider", "frame", "ordinal"]
        indexes = [
            # Serves the pump's `Task.objects.due(now)`: covers only ACTIVE rows,
            # so the query does not grow with the history of finished tasks.
            models.Index(
                fields=["next_attempt_at"],
                name="task_due_idx",
                condition=Q(next_attempt_at__isnull=False),
            ),
            models.Index(fields=["state"], name="task_state_idx"),
        ]
        constraints = [
            models.CheckConstraint(
                name="task_due_iff_active",
                condition=(Q(state__in=ACTIVE) & Q(next_attempt_at__isnull=False))
                | (~Q(state__in=ACTIVE) & Q(next_attempt_at__isnull=True)),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.provider_label or self.provider} {self.frame} #{self.ordinal} ({self.state})"

    def saved(self, part: str) -> dict[str, Any]:
        """Return one object of Ember's saved answer (`image`, `history`), or {}.

        {} as well when the answer, or that part of it, is not an object: only an old
        row or an edit can hold one (the client refuses such answers), and a reader
        must not fail on it.
        """
        value = self.result.get(part) if isinstance(self.result, dict) else None
        return value if isinstance(value, dict) else {}

    def saved_history_error(self) -> str:
        """Return what Ember's saved answer says went wrong writing its history row, or ""."""
        said = self.result.get("history_error") if isinstance(self.result, dict) else None
        return str(said) if said else ""

    def cancellable(self) -> bool:
        """Say whether nothing of it may be with Ember yet, so it may be cancelled (§9)."""
        return self.state in CANCELLABLE and self.attempt_under_key() is None

    def attempt_under_key(self) -> "Attempt | None":
        """Return the attempt a clip was sent as under its current key, if it was sent.

        Such a clip may already be with Ember: it can no longer be cancelled, and every
        re-send under the key is the same attempt. Images have no key: always None.
        """
        if self.kind != Kind.CLIP or not self.idempotency_key:
            return None
        return Attempt.objects.filter(task=self, idempotency_key=self.idempotency_key).first()

    def poll_bound_passed(self, now: "datetime | None" = None) -> bool:
        """Say whether the poll bound has passed since the last submit (or nothing was sent).

        Before it, the worker may still learn the job's fate; a resubmit then needs a
        person's word that Ember did not receive it (docs/design.md §8).
        """
        if self.submitted_at is None:
            return True
        waited = ((now or timezone.now()) - self.submitted_at).total_seconds()
        return waited >= POLL_BOUND


class AssetQuerySet(models.QuerySet["Asset"]):
    def create_stored(self, original: "Original", **fields: Any) -> "Asset":
        """Create the row of an original already in the store, its facts taken from the file."""
        return self.create(**stored_facts(original), **fields)


def stored_facts(original: "Original") -> dict[str, Any]:
    """Return the columns a stored original decides: its hash, type, dimensions and size."""
    info = original.info
    return {
        "sha256": original.sha256,
        "mime": info.mime,
        "width": info.width,
        "height": info.height,
        "size": original.size,
    }


class Asset(Versioned):
    # Not unique: two results may carry the same bytes (a provider's placeholder, a
    # cached answer, a reference photo sent back), and each is its own asset row with
    # its own Ember ids, sharing one content-addressed file. Only an upload is one row
    # per photo (the constraint below).
    sha256 = models.CharField(max_length=64)
    file_name = models.CharField(max_length=255)
    mime = models.CharField(max_length=60)
    width = models.PositiveIntegerField()
    height = models.PositiveIntegerField()
    size = models.PositiveBigIntegerField()
    label = models.CharField(max_length=200, blank=True, default="")
    origin = models.CharField(max_length=12, choices=Origin.choices)
    subjects = models.ManyToManyField(Subject, blank=True, related_name="assets")
    references = models.JSONField(default=list, blank=True)  # asset ids
    task = models.OneToOneField(
        Task, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    batch = models.ForeignKey(
        Batch, null=True, blank=True, on_delete=models.PROTECT, related_name="assets"
    )
    workflow = models.CharField(max_length=60, blank=True, default="")
    ember_image_id = models.CharField(max_length=120, blank=True, default="", db_index=True)
    ember_history_id = models.CharField(max_length=120, blank=True, default="")
    provider = models.CharField(max_length=60, blank=True, default="")
    model = models.CharField(max_length=120, blank=True, default="")
    prompt = models.TextField(blank=True, default="")
    upstream = models.JSONField(null=True, blank=True)  # Ember's answer
    created_at = models.DateTimeField(auto_now_add=True)

    objects = AssetQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            # Serves the gallery's newest-first pages without sorting every asset.
            models.Index(fields=["-created_at", "-id"], name="asset_newest_idx"),
            # Serves lookups by content: add_reference's get-or-create of an upload.
            models.Index(fields=["sha256"], name="asset_sha256_idx"),
        ]
        constraints = [
            # The same photo uploaded twice (for two subjects) is one reference row.
            models.UniqueConstraint(
                fields=["sha256"],
                condition=Q(origin="uploaded"),
                name="asset_uploaded_sha256_unique",
            ),
        ]

    def __str__(self) -> str:
        return self.label or self.file_name


class BatchKey(models.Model):
    """The batch a person's request planned under an idempotency key, kept for `LIFETIME`.

    API clients send the key as `Idempotency-Key`; the new-batch form sends a one-time
    token under the `form:` prefix. The same key again answers with this batch.
    """

    LIFETIME = timedelta(hours=24)
    MAX_LENGTH = 200  # characters, the longest key a client may send

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=MAX_LENGTH)
    # The canonical JSON of the request: the same key with another body is refused.
    body_sha256 = models.CharField(max_length=64)
    batch = models.ForeignKey(Batch, on_delete=models.CASCADE, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            # Two requests racing with one key: the second insert fails, and its
            # request answers with the first one's batch (it also serves the lookup).
            models.UniqueConstraint(fields=["user", "key"], name="batch_key_unique"),
        ]

    def __str__(self) -> str:
        return f"key {self.key!r} of {self.user_id} → batch {self.batch_id}"


class AttemptQuerySet(models.QuerySet["Attempt"]):
    def sends(self) -> "AttemptQuerySet":
        """The sends that may have made an original (a failed job made none), latest first."""
        return self.exclude(outcome=Attempt.Outcome.FAILED).order_by("-number")


class Attempt(Versioned):
    class Outcome(models.TextChoices):
        ACCEPTED = "accepted"  # 202: Ember has the job
        UNKNOWN = "unknown"  # the request may or may not have reached Ember
        FAILED = "failed"  # Ember had the job, and it failed: no original came of it

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="attempts")
    number = models.PositiveSmallIntegerField()
    # A clip's key when sent (blank for images): every send under one key is one attempt,
    # since Ember answers them all with the same job and charges it once.
    idempotency_key = models.CharField(max_length=64, blank=True, default="")
    # Indexed: a job Ember names for a new send is looked up among the earlier ones.
    ember_job_id = models.CharField(max_length=120, blank=True, default="", db_index=True)
    submitted_at = models.DateTimeField()
    answered_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=12, choices=Outcome.choices)
    error = models.TextField(blank=True, default="")

    objects = AttemptQuerySet.as_manager()

    class Meta:
        ordering = ["task", "number"]
        constraints = [
            models.UniqueConstraint(fields=["task", "number"], name="attempt_number_unique"),
        ]

    def __str__(self) -> str:
        return f"attempt {self.number} of {self.task_id}"


class HistorySearch(Versioned):
    """When the worker last searched Ember's history for an uncertain task's lost submit.

    Kept in the database, not in the worker's memory, so a restarted worker does not
    search every uncertain task again at once; kept off the task row, so that noting a
    search does not bump the task's version under a person's reconcile or resubmit.
    """

    task = models.OneToOneField(
        Task, primary_key=True, on_delete=models.CASCADE, related_name="history_search"
    )
    searched_at = models.DateTimeField()
    searches = models.PositiveIntegerField(default=0)

    class Meta:
        indexes = [
            # Serves the per-minute cap: how many searches began in the last minute.
            models.Index(fields=["searched_at"], name="history_search_recent_idx"),
        ]

    def __str__(self) -> str:
        return f"history of {self.task_id} searched {self.searches}x, last {self.searched_at}"


class AvatarSet(Versioned):
    name = models.CharField(max_length=120)
    assets: "models.ManyToManyField[Asset, SetItem]" = models.ManyToManyField(
        Asset, through="SetItem", related_name="sets"
    )
    published_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.name


class SetItem(models.Model):
    """One chosen asset at its place in a set."""

    avatar_set = models.ForeignKey(AvatarSet, on_delete=models.CASCADE, related_name="items")
    asset = models.ForeignKey(Asset, on_delete=models.PROTECT, related_name="+")
    position = models.PositiveIntegerField()

    class Meta:
        ordering = ["avatar_set", "position"]
        constraints = [
            models.UniqueConstraint(fields=["avatar_set", "asset"], name="set_item_unique"),
        ]

    def __str__(self) -> str:
        return f"#{self.position + 1} of set {self.avatar_set_id}: asset {self.asset_id}"


class ApiToken(models.Model):
    """A bearer token for the JSON API. Only its SHA-256 is stored."""

    class Scope(models.TextChoices):
        READ_WRITE = "read_write"  # everything its user may do
        READ_ONLY = "read_only"  # GET routes only: dashboards, backups, audits

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    digest = models.CharField(max_length=64, unique=True)
    scope = models.CharField(max_length=20, choices=Scope.choices, default=Scope.READ_WRITE)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"API token of {self.user} ({self.digest[:8]}…, {self.scope})"

    @property
    def may_write(self) -> bool:
        return self.scope == self.Scope.READ_WRITE


class WorkerHeartbeat(models.Model):
    """The one row the worker refreshes every few seconds, so people know why tasks wait."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    started_at = models.DateTimeField()
    seen_at = models.DateTimeField()
    pid = models.PositiveIntegerField()
    host = models.CharField(max_length=255)
    stopped = models.BooleanField(default=False)  # a clean stop sets it; seen_at is then when

    STALE_AFTER = worker_seen.STALE_AFTER  # seconds without a beat: gone
    ALIVE_FILE = worker_seen.ALIVE_FILE  # in the data dir, touched beside the row

    def __str__(self) -> str:
        return f"worker {self.pid}@{self.host}, seen {self.seen_at:%Y-%m-%d %H:%M:%S}"

    @classmethod
    def status(cls) -> str:
        """Say, for people, whether a worker is driving tasks right now."""
        return worker_seen.status(cls.objects.filter(pk=1).first())


class ScrubReport(models.Model):
    """One run of `check_originals`: what it found, kept so the admin can show the last one."""

    PROBLEMS_KEPT = 20  # lines; the command prints them all

    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()
    repair = models.BooleanField(default=False)  # run with --repair
    checked = models.PositiveIntegerField()  # originals the asset rows name
    missing = models.PositiveIntegerField(default=0)
    corrupt = models.PositiveIntegerField(default=0)
    orphans = models.PositiveIntegerField(default=0)  # files no row names
    temporary = models.PositiveIntegerField(default=0)  # temporary files left in originals/
    repaired = models.PositiveIntegerField(default=0)
    unrepaired = models.PositiveIntegerField(default=0)
    # Nothing missing or corrupt once repairs are counted: the command's exit code was 0.
    passed = models.BooleanField()
    summary = models.CharField(max_length=300)
    problems = models.JSONField(default=list)  # the first PROBLEMS_KEPT lines, for people

    class Meta:
        ordering = ["-finished_at"]
        get_latest_by = "finished_at"

    def __str__(self) -> str:
        return f"scrub of {self.finished_at:%Y-%m-%d %H:%M:%S}: {self.summary}"

    @classmethod
    def status(cls) -> str:
        """Say, for people, how the last scrub of the originals went."""
        last = cls.objects.first()  # newest first
        if last is None:
            return "no scrub of the originals yet: run manage.py check_originals"
        return (
            f"last scrub {timezone.localtime(last.finished_at):%Y-%m-%d %H:%M %Z}: {last.summary}"
        )
