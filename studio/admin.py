"""The Django admin: see exactly where every task is, and repair what needs a person.

Thin by design (STYLE habit 9). Everything the worker owns is read-only here, and
every repair is an action that calls the same service as the rest of Avatars
(`studio.engine`) and reports, task by task, what it did. The few fields a person
may edit are written with a versioned update: an edit made while the worker
moved the row is refused, never silently written over the worker's change.
"""

import base64
import io
import json
from collections.abc import Iterable
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.utils import flatten_fieldsets
from django.db.models import Count, Model, Q, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.timesince import timesince
from PIL import Image

from studio import engine, originals
from studio.ember.client import EmberError
from studio.models import (
    ACTIVE,
    POLL_BOUND,
    RECONCILABLE,
    ApiToken,
    Asset,
    Attempt,
    AvatarSet,
    Batch,
    Origin,
    SetItem,
    Subject,
    Task,
    TaskState,
    WorkerHeartbeat,
)
from studio.store import Conflict, update

STALE_EDIT = (
    "This row changed while you were editing it (the worker moved it). Reload and try again."
)
NOT_RECEIVED = "I checked Ember and it did not receive this"
PREVIEW_SIZE = 160  # pixels, the longer side of an asset's preview on its change page
REFERENCE_PREVIEW_SIZE = 96  # pixels, the longer side of each photo on a subject's page

admin.site.site_header = "Avatars administration"
admin.site.site_title = "Avatars admin"
admin.site.index_title = "Inspect and repair"


# --- the index: is a worker driving tasks? ----------------------------------------

_site_index = admin.site.index


def _index_with_worker_status(
    request: HttpRequest, extra_context: dict[str, Any] | None = None
) -> TemplateResponse:
    """Show whether a worker is running, so a person knows why tasks wait.

    Django's default site takes no extra index context without a custom AdminSite,
    which would mean changing settings or urls; wrapping its index view is enough.
    """
    context = {"worker_status": WorkerHeartbeat.status(), **(extra_context or {})}
    return _site_index(request, extra_context=context)


admin.site.index = _index_with_worker_status  # type: ignore[method-assign]


# --- helpers ----------------------------------------------------------------------


def admin_link(obj: Model | None, text: object = None) -> str:
    """Return a link to `obj`'s admin change page (or a dash)."""
    if obj is None:
        return "-"
    meta = obj._meta
    url = reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[obj.pk])
    return format_html('<a href="{}">{}</a>', url, obj if text is None else text)


def pretty_json(value: object) -> str:
    """Show JSON the way a person reads it: indented, in a preformatted block."""
    if value in (None, "", [], {}):
        return "-"
    return format_html(
        '<pre style="white-space: pre-wrap; margin: 0">{}</pre>',
        json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False),
    )


def task_name(task: Task) -> str:
    """Name a task in a message: short id, then what it is."""
    return f"Task {str(task.pk)[:8]} ({task.provider} {task.frame} #{task.ordinal})"


def preview_data_uri(asset: Asset, size: int = PREVIEW_SIZE) -> str:
    """Return a small PNG thumbnail of the stored original as a data URI.

    Raises OSError/ValueError when the original is missing or unreadable, and
    originals.ChecksumFailed when it no longer matches its hash.
    """
    data = originals.read(asset.sha256, asset.mime)
    with Image.open(io.BytesIO(data)) as img:
        img.thumbnail((size, size))  # an animated original shows its first frame
        thumb = img.convert("RGBA")
    out = io.BytesIO()
    thumb.save(out, "PNG")
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode("ascii")


def preview(asset: Asset, size: int = PREVIEW_SIZE) -> str:
    """Return an <img> of the original, or say for people why there is none."""
    try:
        uri = preview_data_uri(asset, size)
    except originals.ChecksumFailed:
        return originals.CHECKSUM_FAILED
    except (OSError, ValueError):
        return "The original is not in the store."
    return format_html('<img src="{}" alt="{}">', uri, str(asset))


# --- versioned edits ----------------------------------------------------------------


class VersionedForm(forms.ModelForm):
    """Carry the version the form was rendered with, so saving can insist on it."""

    loaded_version = forms.IntegerField(widget=forms.HiddenInput, min_value=1)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk is not None:
            self.fields["loaded_version"].initial = self.instance.version


class VersionedAdmin(admin.ModelAdmin):
    """Write only the fields a person changed, and only over the version they saw.

    The worker may move a row while its change page is open. Saving then raises
    `Conflict` from the versioned update; the change view refuses the edit with
    STALE_EDIT and rolls back its transaction (no log entry, no inline saves).
    """

    form = VersionedForm

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        fieldsets = list(super().get_fieldsets(request, obj))
        named = flatten_fieldsets(fieldsets)
        if "loaded_version" not in named and fieldsets:
            name, options = fieldsets[0]
            fields = [*options["fields"], "loaded_version"]
            fieldsets[0] = (name, {**options, "fields": fields})
        return fieldsets

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        if not change:
            super().save_model(request, obj, form, change)
            return
        columns = {f.name for f in obj._meta.concrete_fields}
        changed = {name: form.cleaned_data[name] for name in form.changed_data if name in columns}
        if changed:
            update(obj, expected=form.cleaned_data["loaded_version"], **changed)

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except Conflict:
            self.message_user(request, STALE_EDIT, messages.ERROR)
            return HttpResponseRedirect(request.get_full_path())


class ReadOnlyInline(admin.TabularInline):
    """An inline to look at, never to edit through."""

    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ReadOnlyAdmin(admin.ModelAdmin):
    """A model to inspect only: rows are written by the worker or the services."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


# --- tasks --------------------------------------------------------------------------


class StateFilter(admin.SimpleListFilter):
    """Filter by one state, or by the groups the code names (docs/design.md §4)."""

    title = "state"
    parameter_name = "state"
    GROUPS = {"active": ACTIVE, "reconcilable": RECONCILABLE}

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        def group(name: str, states: Iterable[TaskState]) -> tuple[str, str]:
            return name, f"{name.upper()} ({', '.join(s.value for s in states)})"

        return [
            *(group(name, states) for name, states in self.GROUPS.items()),
            *((s.value, s.value) for s in TaskState),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value in self.GROUPS:
            return queryset.filter(state__in=self.GROUPS[value])
        if value in TaskState.values:
            return queryset.filter(state=value)
        return queryset


class AttemptInline(ReadOnlyInline):
    model = Attempt
    fields = ("number", "outcome", "ember_job_id", "submitted_at", "answered_at", "error")
    readonly_fields = fields


@admin.register(Task)
class TaskAdmin(VersionedAdmin):
    list_display = (
        "short_id",
        "state",
        "phase",
        "provider_label",
        "frame",
        "ordinal",
        "batch_link",
        "attempt_count",
        "age",
    )
    list_filter = (StateFilter, "provider", ("batch", admin.RelatedOnlyFieldListFilter))
    search_fields = ("id", "batch__id", "ember_job_id")
    search_help_text = "Task id, batch id or Ember job id."
    ordering = ("-created_at",)
    list_select_related = ("batch",)
    inlines = (AttemptInline,)
    actions = ("reconcile_tasks", "retry_copy", "cancel_tasks", "resubmit_tasks")
    fieldsets = (
        (
            "Where it is",
            {
                "fields": (
                    "state",
                    "phase",
                    "error",
                    "submitted_at",
                    "next_attempt_at",
                    "created_at",
                    "updated_at",
                    "version",
                )
            },
        ),
        (
            "Intent",
            {
                "fields": (
                    "batch_link",
                    "kind",
                    "provider",
                    "provider_label",
                    "model",
                    "frame",
                    "ordinal",
                    "prompt",
                    "subject_links",
                    "frozen_references",
                    "idempotency_key",
                )
            },
        ),
        (
            "Ember",
            {"fields": ("ember_job_id", "saved_answer", "protection", "asset_link")},
        ),
    )
    # Nothing here is a person's to edit: the worker and the services own every field.
    readonly_fields = tuple(
        str(name) for _title, options in fieldsets for name in options["fields"]
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return super().get_queryset(request).annotate(n_attempts=Count("attempts"))

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # tasks are planned by generate(), in one transaction with their batch

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # a task is the record of what was paid for

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        context = {"worker_status": WorkerHeartbeat.status(), **(extra_context or {})}
        return super().changelist_view(request, extra_context=context)

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        context = {"show_save": False, "show_save_and_continue": False, **(extra_context or {})}
        return super().change_view(request, object_id, form_url, extra_context=context)

    # --- columns and fields

    @admin.display(description="task", ordering="id")
    def short_id(self, task: Task) -> str:
        return str(task.pk)[:8]

    @admin.display(description="batch", ordering="batch__created_at")
    def batch_link(self, task: Task) -> str:
        return admin_link(task.batch)

    @admin.display(description="attempts", ordering="n_attempts")
    def attempt_count(self, task: Task) -> int:
        n = getattr(task, "n_attempts", None)
        return task.attempts.count() if n is None else n

    @admin.display(description="age", ordering="created_at")
    def age(self, task: Task) -> str:
        return timesince(task.created_at)

    @admin.display(description="subjects")
    def subject_links(self, task: Task) -> str:
        subjects = Subject.objects.filter(pk__in=task.subjects)
        return format_html_join(", ", "{}", ((admin_link(s),) for s in subjects)) or "-"

    @admin.display(description="references (frozen)")
    def frozen_references(self, task: Task) -> str:
        return pretty_json(task.references)

    @admin.display(description="Ember's saved answer")
    def saved_answer(self, task: Task) -> str:
        if not task.result:
            return "-"
        result = task.result
        image = result.get("image") or {}
        history = result.get("history") or {}
        summary = [
            ("image id", image.get("id") or "-"),
            ("history id", history.get("id") or "-"),
            ("history error", result.get("history_error") or "-"),
        ]
        lines = format_html_join("", "<div><strong>{}:</strong> {}</div>", summary)
        return format_html("{}{}", lines, pretty_json(result))

    @admin.display(description="protection released")
    def protection(self, task: Task) -> str:
        return protection_text(task.protection_released)

    @admin.display(description="asset")
    def asset_link(self, task: Task) -> str:
        return admin_link(task.asset)

    # --- repair actions: each calls a service and reports per task

    def report(self, request: HttpRequest, task: Task, text: str, level: int) -> None:
        """Tell the person what happened to `task`; a repair that took goes in its history."""
        self.message_user(request, f"{task_name(task)}: {text}", level)
        if level == messages.SUCCESS:
            self.log_change(request, task, text)

    @admin.action(description="Reconcile with Ember's history", permissions=["change"])
    def reconcile_tasks(self, request: HttpRequest, queryset: QuerySet[Task]) -> None:
        for task in queryset:
            if task.state not in RECONCILABLE:
                self.report(
                    request,
                    task,
                    f"skipped; a {task.state} task is not reconcilable "
                    f"(only {', '.join(RECONCILABLE)}).",
                    messages.WARNING,
                )
                continue
            self._reconcile(request, task)

    @admin.action(description="Retry the copy from Ember's saved answer", permissions=["change"])
    def retry_copy(self, request: HttpRequest, queryset: QuerySet[Task]) -> None:
        for task in queryset:
            if task.state != TaskState.COPY_FAILED:
                self.report(
                    request,
                    task,
                    f"skipped; only a copy_failed task's copy can be retried (it is {task.state}).",
                    messages.WARNING,
                )
                continue
            self._reconcile(request, task)

    def _reconcile(self, request: HttpRequest, task: Task) -> None:
        before = task.state
        try:
            task = engine.reconcile(task=task)
        except Conflict:
            self.report(
                request, task, "moved while being reconciled; nothing written.", messages.ERROR
            )
            return
        except EmberError as exc:
            self.report(request, task, f"Ember could not be asked: {exc.message}", messages.ERROR)
            return
        if task.state == TaskState.COPYING:
            self.report(
                request,
                task,
                f"{before} → copying; the worker will copy the original from Ember's answer.",
                messages.SUCCESS,
            )
        else:
            self.report(request, task, f"still {task.state}: {task.phase}.", messages.WARNING)

    @admin.action(description="Cancel (only before anything is sent)", permissions=["change"])
    def cancel_tasks(self, request: HttpRequest, queryset: QuerySet[Task]) -> None:
        for task in queryset:
            if task.state == TaskState.CANCELLED:
                self.report(request, task, "already cancelled; nothing to do.", messages.INFO)
                continue
            try:
                engine.cancel_task(task=task)
            except engine.TooLate as exc:
                self.report(request, task, str(exc), messages.WARNING)
            else:
                self.report(
                    request, task, "cancelled; nothing was sent to Ember.", messages.SUCCESS
                )

    @admin.action(description="Resubmit an uncertain task (may pay twice)…", permissions=["change"])
    def resubmit_tasks(
        self, request: HttpRequest, queryset: QuerySet[Task]
    ) -> TemplateResponse | None:
        """Show the warning and a per-task check first; only the confirmed form resubmits."""
        tasks = list(queryset)
        if request.POST.get("post") == "yes":
            checked = set(request.POST.getlist("not_received"))
            for task in tasks:
                self._resubmit(request, task, confirmed_not_received=str(task.pk) in checked)
            return None
        if not any(t.state == TaskState.UNCERTAIN for t in tasks):
            for task in tasks:
                self.report(
                    request,
                    task,
                    f"skipped; only an uncertain task can be resubmitted (it is {task.state}).",
                    messages.WARNING,
                )
            return None
        # For the page only: engine.resubmit applies the same bound and has the last word.
        now = timezone.now()
        rows = [
            {
                "task": task,
                "name": task_name(task),
                "uncertain": task.state == TaskState.UNCERTAIN,
                "sent": task.submitted_at,
                "bound_passed": task.poll_bound_passed(now),
            }
            for task in tasks
        ]
        context = {
            **self.admin_site.each_context(request),
            "title": "Resubmit uncertain tasks?",
            "opts": self.model._meta,
            "rows": rows,
            "warning": engine.RESUBMIT_WARNING,
            "not_received_label": NOT_RECEIVED,
            "poll_bound_minutes": round(POLL_BOUND / 60),
            "action_checkbox_name": ACTION_CHECKBOX_NAME,
        }
        return TemplateResponse(request, "admin/studio/task/resubmit_confirmation.html", context)

    def _resubmit(self, request: HttpRequest, task: Task, *, confirmed_not_received: bool) -> None:
        try:
            engine.resubmit(task=task, confirmed_not_received=confirmed_not_received)
        except engine.ResubmitRefused as exc:
            self.report(request, task, str(exc), messages.ERROR)
        except Conflict:
            self.report(request, task, "moved while being resubmitted; not sent.", messages.ERROR)
        else:
            self.report(
                request,
                task,
                "queued again; the worker sends it as a new attempt.",
                messages.SUCCESS,
            )


def protection_text(released: bool | None) -> str:
    """Say what is known about Ember's protection of its copy (docs/design.md §6.7, step 4)."""
    if released is None:
        return "not tried yet"
    return "released" if released else "unconfirmed (asked; Ember did not confirm)"


# --- batches ------------------------------------------------------------------------


class TaskInline(ReadOnlyInline):
    model = Task
    fields = ("task_link", "state", "phase", "provider_label", "frame", "ordinal", "ember_job_id")
    readonly_fields = fields
    ordering = ("provider", "frame", "ordinal")

    @admin.display(description="task")
    def task_link(self, task: Task) -> str:
        return admin_link(task, str(task.pk)[:8])


@admin.register(Batch)
class BatchAdmin(VersionedAdmin):
    list_display = ("title", "created_at", "created_by", "progress_summary")
    search_fields = ("id", "title")
    search_help_text = "Batch id or title."
    inlines = (TaskInline,)
    actions = ("cancel_batches",)
    fields = ("title", "id", "created_by", "created_at", "version", "progress", "request_json")
    readonly_fields = (
        "title",
        "id",
        "created_by",
        "created_at",
        "version",
        "progress",
        "request_json",
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        # One query for the whole page: a conditional count per state.
        counts = {f"n_{s.value}": Count("tasks", filter=Q(tasks__state=s)) for s in TaskState}
        return super().get_queryset(request).select_related("created_by").annotate(**counts)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # batches are planned by generate() on the studio pages or the API

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        context = {"show_save": False, "show_save_and_continue": False, **(extra_context or {})}
        return super().change_view(request, object_id, form_url, extra_context=context)

    @admin.display(description="progress")
    def progress_summary(self, batch: Batch) -> str:
        parts = [
            f"{s.value} {getattr(batch, f'n_{s.value}', 0)}"
            for s in TaskState
            if getattr(batch, f"n_{s.value}", 0)
        ]
        return " · ".join(parts) or "no tasks"

    @admin.display(description="tasks by state")
    def progress(self, batch: Batch) -> SafeString:
        counts = engine.progress(batch=batch)
        rows = [(s.value, counts[s.value]) for s in TaskState if counts[s.value]]
        rows += [
            ("total", counts["total"]),
            ("finished", counts["finished"]),
            ("paid requests", counts["paid_requests"]),
        ]
        return format_html(
            "<table><tbody>{}</tbody></table>",
            format_html_join("", "<tr><th>{}</th><td>{}</td></tr>", rows),
        )

    @admin.display(description="request")
    def request_json(self, batch: Batch) -> str:
        return pretty_json(batch.request)

    @admin.action(description="Cancel what has not been sent yet", permissions=["change"])
    def cancel_batches(self, request: HttpRequest, queryset: QuerySet[Batch]) -> None:
        for batch in queryset:
            outcome = engine.cancel_batch(batch=batch)
            self.message_user(
                request,
                f"Batch {batch}: cancelled {len(outcome.cancelled)} task(s); "
                f"kept {len(outcome.kept)} already with Ember or finished.",
                messages.SUCCESS if outcome.cancelled else messages.INFO,
            )


# --- assets -------------------------------------------------------------------------


class HistoryFilter(admin.SimpleListFilter):
    """Find the generated originals that still block publishing."""

    title = "Ember history"
    parameter_name = "history"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("missing", "generated, history missing"), ("recorded", "history recorded")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "missing":
            return queryset.filter(origin=Origin.GENERATED, ember_history_id="")
        if self.value() == "recorded":
            return queryset.exclude(ember_history_id="")
        return queryset


@admin.register(Asset)
class AssetAdmin(VersionedAdmin):
    list_display = (
        "__str__",
        "origin",
        "provider",
        "short_sha",
        "ember_image_id",
        "history",
        "protection",
        "task_link",
        "batch_link",
        "created_at",
    )
    list_filter = ("origin", HistoryFilter, "provider")
    list_select_related = ("task", "batch")
    search_fields = ("sha256", "label", "file_name", "ember_image_id", "ember_history_id")
    search_help_text = "Hash, label, file name, Ember image or history id."
    fieldsets = (
        (None, {"fields": ("preview", "label")}),
        (
            "Original",
            {"fields": ("sha256", "file_name", "mime", "width", "height", "size", "origin")},
        ),
        (
            "Where it came from",
            {
                "fields": (
                    "task_link",
                    "batch_link",
                    "subject_list",
                    "references",
                    "provider",
                    "model",
                    "workflow",
                    "prompt",
                )
            },
        ),
        (
            "Ember",
            {
                "fields": (
                    "ember_image_id",
                    "ember_history_id",
                    "protection",
                    "upstream_json",
                )
            },
        ),
        (None, {"fields": ("created_at", "version")}),
    )
    # A person may rename an original; everything else records what happened.
    readonly_fields = (
        "preview",
        "sha256",
        "file_name",
        "mime",
        "width",
        "height",
        "size",
        "origin",
        "task_link",
        "batch_link",
        "subject_list",
        "references",
        "provider",
        "model",
        "workflow",
        "prompt",
        "ember_image_id",
        "ember_history_id",
        "protection",
        "upstream_json",
        "created_at",
        "version",
    )

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # originals arrive through an upload or the worker's copy

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # never lose an original someone paid for

    @admin.display(description="preview")
    def preview(self, asset: Asset) -> str:
        # Change page only: reading an original for every changelist row is not cheap.
        return preview(asset)

    @admin.display(description="sha256", ordering="sha256")
    def short_sha(self, asset: Asset) -> str:
        return asset.sha256[:12]

    @admin.display(description="Ember history", ordering="ember_history_id")
    def history(self, asset: Asset) -> str:
        if asset.ember_history_id:
            return asset.ember_history_id
        return "missing" if asset.origin == Origin.GENERATED else "-"

    @admin.display(description="protection released")
    def protection(self, asset: Asset) -> str:
        if asset.task is None:
            return "-"
        return protection_text(asset.task.protection_released)

    @admin.display(description="task")
    def task_link(self, asset: Asset) -> str:
        return admin_link(asset.task, str(asset.task_id)[:8]) if asset.task else "-"

    @admin.display(description="batch")
    def batch_link(self, asset: Asset) -> str:
        return admin_link(asset.batch)

    @admin.display(description="subjects")
    def subject_list(self, asset: Asset) -> str:
        links = [admin_link(s) for s in asset.subjects.all()]
        return format_html_join(", ", "{}", ((link,) for link in links)) or "-"

    @admin.display(description="Ember's answer")
    def upstream_json(self, asset: Asset) -> str:
        return pretty_json(asset.upstream)


# --- sets ---------------------------------------------------------------------------


class SetItemInline(ReadOnlyInline):
    model = SetItem
    fields = ("position", "asset_link", "origin", "history")
    readonly_fields = fields
    verbose_name = "chosen asset"

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return super().get_queryset(request).select_related("asset")

    @admin.display(description="asset")
    def asset_link(self, item: SetItem) -> str:
        return admin_link(item.asset)

    @admin.display(description="origin")
    def origin(self, item: SetItem) -> str:
        return item.asset.origin

    @admin.display(description="Ember history")
    def history(self, item: SetItem) -> str:
        if item.asset.ember_history_id:
            return item.asset.ember_history_id
        return "missing (blocks publishing)" if item.asset.origin == Origin.GENERATED else "-"


@admin.register(AvatarSet)
class AvatarSetAdmin(VersionedAdmin):
    list_display = ("name", "item_count", "published_at", "created_at")
    search_fields = ("name",)
    fields = ("name", "published_at", "created_at", "version")
    readonly_fields = ("published_at", "created_at", "version")
    inlines = (SetItemInline,)
    actions = ("publish_sets",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return super().get_queryset(request).annotate(n_items=Count("items"))

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # sets are chosen on the studio pages

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="assets", ordering="n_items")
    def item_count(self, avatar_set: AvatarSet) -> int:
        n = getattr(avatar_set, "n_items", None)
        return avatar_set.items.count() if n is None else n

    @admin.action(description="Publish", permissions=["change"])
    def publish_sets(self, request: HttpRequest, queryset: QuerySet[AvatarSet]) -> None:
        for avatar_set in queryset:
            try:
                engine.publish(avatar_set=avatar_set)
            except engine.PublishRefused as exc:
                self.message_user(request, f"{avatar_set}: not published. {exc}", messages.ERROR)
            else:
                self.message_user(request, f"{avatar_set}: published.", messages.SUCCESS)


# --- subjects -----------------------------------------------------------------------


@admin.register(Subject)
class SubjectAdmin(VersionedAdmin):
    list_display = ("name", "slug", "n_references", "created_at")
    search_fields = ("name", "slug")
    fields = ("name", "slug", "created_at", "version", "reference_photos")
    readonly_fields = ("slug", "created_at", "version", "reference_photos")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        uploaded = Q(assets__origin=Origin.UPLOADED)
        return super().get_queryset(request).annotate(n_refs=Count("assets", filter=uploaded))

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # subjects are created on the studio pages (engine.create_subject)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="reference photos", ordering="n_refs")
    def n_references(self, subject: Subject) -> int:
        n = getattr(subject, "n_refs", None)
        return subject.assets.filter(origin=Origin.UPLOADED).count() if n is None else n

    @admin.display(description="reference photos")
    def reference_photos(self, subject: Subject) -> str:
        # Shown inline as a read-only table rather than an InlineModelAdmin: the
        # many-to-many row has no name of its own, and nothing here is edited.
        photos = subject.assets.filter(origin=Origin.UPLOADED).order_by("pk")
        rows = [
            (
                preview(photo, REFERENCE_PREVIEW_SIZE),
                admin_link(photo, photo.file_name),
                f"{photo.width} x {photo.height}",
                photo.sha256,
            )
            for photo in photos
        ]
        if not rows:
            return "none yet"
        return format_html(
            "<table><thead><tr><th>photo</th><th>file</th><th>size</th><th>sha256</th>"
            "</tr></thead><tbody>{}</tbody></table>",
            format_html_join("", "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>", rows),
        )


# --- records to look at -------------------------------------------------------------


@admin.register(Attempt)
class AttemptAdmin(ReadOnlyAdmin):
    list_display = ("task", "number", "outcome", "ember_job_id", "submitted_at", "answered_at")
    list_filter = ("outcome",)
    list_select_related = ("task",)
    search_fields = ("ember_job_id", "task__id")
    search_help_text = "Ember job id or task id."


@admin.register(WorkerHeartbeat)
class WorkerHeartbeatAdmin(ReadOnlyAdmin):
    list_display = ("pid", "host", "started_at", "seen_at", "status")

    @admin.display(description="status")
    def status(self, beat: WorkerHeartbeat) -> str:
        return WorkerHeartbeat.status()


@admin.register(ApiToken)
class ApiTokenAdmin(ReadOnlyAdmin):
    list_display = ("user", "prefix", "scope", "created_at", "last_used_at")
    fields = ("user", "prefix", "scope", "created_at", "last_used_at")
    readonly_fields = fields
    list_select_related = ("user",)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return True  # deleting a token revokes it

    @admin.display(description="digest")
    def prefix(self, token: ApiToken) -> str:
        return f"{token.digest[:8]}…"
