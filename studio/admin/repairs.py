"""The task admin's repairs: each calls a service and reports, task by task, what it did.

Each is an action on the task list and, for the repairs that apply to a task as it is
now, a button on the task's own page that runs the same action on that one task.
"""

from collections import Counter
from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.utils import quote, unquote
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseRedirect,
)
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone

from studio import engine
from studio.admin.base import VersionedAdmin
from studio.ember.client import EmberError
from studio.engine.lost_sends import reconcilable
from studio.engine.lost_sends import said as lost_said
from studio.engine.recovery import RECORDING_HISTORY, copy_gone, history_unread
from studio.models import POLL_BOUND, RECONCILABLE, Task, TaskState
from studio.phrases import GONE_ADVICE
from studio.store import Conflict

NOT_RECEIVED = "I checked Ember and it did not receive this"
# Skipped tasks past this many are said in one message, by state: a "select all" over
# thousands of tasks once gave a message for each (a review counted 2,906).
SKIPS_EACH = 10
# Uncertain tasks one resubmit confirmation shows: each wants a look in Ember, and each
# row posts two fields (Django reads at most 1,000: a review's 2,906 rows got a 400).
RESUBMIT_AT_ONCE = 100
REPAIRS_HERE = "Repairs run from the buttons on this page; nothing was changed."


def task_name(task: Task) -> str:
    """Name a task in a message: short id, then what it is."""
    return f"Task {str(task.pk)[:8]} ({task.provider_label} {task.frame} #{task.ordinal})"


# The repairs a task's page offers, by what the task is now. For the page only: each
# action judges the task again when it runs, and its service has the last word.
OFFERED: dict[str, Callable[[Task], bool]] = {
    # A done task with an earlier send not looked for too: its reconcile names what Ember holds.
    "reconcile_tasks": reconcilable,
    "retry_copy": lambda task: task.state == TaskState.COPY_FAILED,
    # A clip sent under its current key may already be with Ember: it goes on.
    "cancel_tasks": Task.cancellable,
    "resubmit_tasks": lambda task: task.state == TaskState.UNCERTAIN,
    # Nothing was paid for a failed task without an attempt (docs/design.md §8).
    "requeue_tasks": lambda task: task.state == TaskState.FAILED and not engine.was_sent(task),
    # Ember did not confirm the release, and nothing asks it again on its own (§6.7).
    "release_again": lambda task: (
        task.state in engine.RELEASABLE and task.protection_released is False
    ),
}


class TaskRepairs(VersionedAdmin):
    """The repair actions of the task admin, apart from how tasks are listed and shown."""

    def get_urls(self) -> list[URLPattern]:
        repair = path(
            "<path:object_id>/repair/<str:action>/",
            self.admin_site.admin_view(self.repair_view),
            name=f"{self.opts.app_label}_{self.opts.model_name}_repair",
        )
        return [repair, *super().get_urls()]

    def repair_view(self, request: HttpRequest, object_id: str, action: str) -> HttpResponse:
        """Run one repair action on one task from the task's page, and come back to the page.

        It is the list's action (same checks, same messages); resubmit answers with its
        confirmation page, whose form posts back here.
        """
        if request.method != "POST":  # its address opened: the page its buttons are on
            messages.info(request, REPAIRS_HERE)
            return HttpResponseRedirect(self._url("change", quote(unquote(object_id))))
        if action not in OFFERED:
            raise Http404("No such repair.")
        found = self.get_actions(request).get(action)  # only those this person may run
        if found is None:
            raise PermissionDenied
        task = self.get_object(request, unquote(object_id))
        if task is None:
            raise Http404("No such task.")
        run = found[0]
        response = run(self, request, self._one(request, task))
        if isinstance(response, HttpResponse):  # resubmit's confirmation page
            return response
        return HttpResponseRedirect(self._url("change", quote(task.pk)))

    def _one(self, request: HttpRequest, task: Task) -> QuerySet[Task]:
        return self.get_queryset(request).filter(pk=task.pk)

    def _url(self, name: str, *args: str) -> str:
        return reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_{name}", args=args)

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: Any = None,
    ) -> HttpResponse:
        if obj is not None:
            context["repairs"] = self.repair_buttons(request, obj)
        return super().render_change_form(request, context, add, change, form_url, obj)

    def repair_buttons(self, request: HttpRequest, task: Task) -> list[dict[str, str]]:
        """Return the repairs that apply to `task` as it is now and this person may run."""
        actions = self.get_actions(request)
        return [
            {
                "action": action,
                "label": str(found[2]),
                "url": self._url("repair", quote(task.pk), action),
            }
            for action, applies in OFFERED.items()
            if (found := actions.get(action)) is not None and applies(task)
        ]

    def report(self, request: HttpRequest, task: Task, text: str, level: int) -> None:
        """Tell the person what happened to `task`; a repair that took goes in its history."""
        self.message_user(request, f"{task_name(task)}: {text}", level)
        if level == messages.SUCCESS:
            self.log_change(request, task, text)

    def skipped(self, request: HttpRequest, tasks: list[Task], why: Callable[[str], str]) -> None:
        """Say which tasks were skipped and `why` (given a state): each, or by state."""
        if len(tasks) <= SKIPS_EACH:
            for task in tasks:
                self.report(request, task, f"skipped; {why(task.state)}", messages.WARNING)
            return
        states = Counter(task.state for task in tasks)
        for state, count in sorted(states.items()):
            said = f"{count} selected {state} task{'' if count == 1 else 's'} skipped; {why(state)}"
            self.message_user(request, said, messages.WARNING)

    @admin.action(description="Reconcile with Ember's history", permissions=["change"])
    def reconcile_tasks(self, request: HttpRequest, queryset: QuerySet[Task]) -> None:
        tasks = list(queryset)
        taken = [task for task in tasks if reconcilable(task)]
        self.skipped(
            request,
            [task for task in tasks if task not in taken],
            lambda state: (
                f"a {state} task is not reconcilable (only {', '.join(RECONCILABLE)}, "
                "and done with an earlier send not looked for)."
            ),
        )
        self._reconcile_each(request, taken)

    @admin.action(description="Retry the copy from Ember's saved answer", permissions=["change"])
    def retry_copy(self, request: HttpRequest, queryset: QuerySet[Task]) -> None:
        tasks = list(queryset)
        self.skipped(
            request,
            [task for task in tasks if task.state != TaskState.COPY_FAILED],
            lambda state: f"only a copy_failed task's copy can be retried (it is {state}).",
        )
        self._reconcile_each(request, [t for t in tasks if t.state == TaskState.COPY_FAILED])

    def _reconcile_each(self, request: HttpRequest, tasks: list[Task]) -> None:
        """Reconcile each task; once Ember cannot be asked, ask it about none of the rest.

        Each question to an Ember that hangs waits out its deadline: a review held the
        admin's request 30 s a task (and a proxy would have given up on it first).
        """
        for done, task in enumerate(tasks):
            if not self._reconcile(request, task) and len(tasks) > done + 1:
                left = len(tasks) - done - 1
                self.message_user(
                    request,
                    f"Ember was not asked about the other {left} selected task(s), left as they "
                    "are: reconcile them once Ember answers.",
                    messages.WARNING,
                )
                return

    def _reconcile(self, request: HttpRequest, task: Task) -> bool:
        """Reconcile one task and report it; return False when Ember could not be asked."""
        before, gone = task.state, copy_gone(task)
        try:
            task = engine.reconcile(task=task)
        except Conflict:
            self.report(
                request, task, "moved while being reconciled; nothing written.", messages.ERROR
            )
            return True
        except EmberError as exc:
            self.report(request, task, history_unread(exc), messages.ERROR)
            return False
        self._reconciled(request, task, before, gone=gone)
        return True

    def _reconciled(self, request: HttpRequest, task: Task, before: str, *, gone: bool) -> None:
        """Say where a reconcile left `task` (from `before`), and what the worker does next."""
        if task.state == TaskState.COPYING and gone:
            self.report(request, task, f"{before} → copying, but {GONE_ADVICE}", messages.WARNING)
        elif task.state == TaskState.COPYING:
            # An original already saved is not fetched again: only its history is filled in
            # (a review read "will copy the original" for history_missing tasks).
            then = (
                "the original is saved already; the worker fills in Ember's history id."
                if task.phase == RECORDING_HISTORY
                else "the worker will copy the original from Ember's answer."
            )
            self.report(request, task, f"{before} → copying; {then}", messages.SUCCESS)
        elif task.state == TaskState.DONE:  # an earlier send, looked up
            self.report(request, task, f"done; {lost_said(task)}", messages.INFO)
        else:
            self.report(request, task, f"still {task.state}: {task.phase}.", messages.WARNING)

    @admin.action(description="Cancel (only before anything is sent)", permissions=["change"])
    def cancel_tasks(self, request: HttpRequest, queryset: QuerySet[Task]) -> None:
        for task in queryset:
            if task.state == TaskState.CANCELLED:
                self.report(request, task, "already cancelled; nothing to do.", messages.INFO)
                continue
            try:
                task = engine.cancel_task(task=task)
            except engine.TooLate as exc:
                self.report(request, task, str(exc), messages.WARNING)
            else:
                self._report_cancel(request, task)

    def _report_cancel(self, request: HttpRequest, task: Task) -> None:
        if task.state == TaskState.UNCERTAIN:  # a resubmit not sent yet is withdrawn instead
            self.report(request, task, engine.RESUBMIT_WITHDRAWN, messages.SUCCESS)
        else:
            self.report(request, task, "cancelled; nothing was sent to Ember.", messages.SUCCESS)

    @admin.action(description="Resubmit an uncertain task (may pay twice)…", permissions=["change"])
    def resubmit_tasks(
        self, request: HttpRequest, queryset: QuerySet[Task]
    ) -> TemplateResponse | None:
        """Show the warning and a per-task check first; only the confirmed form resubmits."""
        tasks = list(queryset)
        if request.POST.get("post") == "yes":
            checked = set(request.POST.getlist("not_received"))
            for task in tasks:
                self._resubmit(
                    request,
                    task,
                    seen=request.POST.get(f"version-{task.pk}", ""),
                    confirmed_not_received=str(task.pk) in checked,
                )
            return None
        unsure = [task for task in tasks if task.state == TaskState.UNCERTAIN]
        if not unsure:
            self.skipped(
                request,
                tasks,
                lambda state: f"only an uncertain task can be resubmitted (it is {state}).",
            )
            return None
        if len(unsure) > RESUBMIT_AT_ONCE:
            self.message_user(
                request,
                f"{len(unsure)} uncertain tasks were selected; resubmit at most "
                f"{RESUBMIT_AT_ONCE} at a time, each looked up in Ember first. Nothing was "
                "sent: filter the list and select fewer.",
                messages.ERROR,
            )
            return None
        return self._resubmit_confirmation(request, unsure, skipped=len(tasks) - len(unsure))

    def _resubmit_confirmation(
        self, request: HttpRequest, tasks: list[Task], *, skipped: int
    ) -> TemplateResponse:
        """Ask, with the warning, which uncertain tasks a person checked in Ember; the
        `skipped` others selected are counted, not listed (nor posted again)."""
        # For the page only: engine.resubmit applies the same bound and has the last word.
        now = timezone.now()
        rows = [
            {
                "task": task,
                "name": task_name(task),
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
            "skipped": skipped,
            "warning": engine.RESUBMIT_WARNING,
            "not_received_label": NOT_RECEIVED,
            "poll_bound_minutes": round(POLL_BOUND / 60),
            "action_checkbox_name": ACTION_CHECKBOX_NAME,
        }
        return TemplateResponse(request, "admin/studio/task/resubmit_confirmation.html", context)

    def _resubmit(
        self, request: HttpRequest, task: Task, *, seen: str, confirmed_not_received: bool
    ) -> None:
        """Resubmit `task` if it is still as the confirmation showed it (version `seen`)."""
        try:
            # A form without the version (or with one that is not a number) showed nothing.
            seen_version = int(seen) if seen.isdigit() else -1
            engine.resubmit(
                task=task,
                seen_version=seen_version,
                confirmed_not_received=confirmed_not_received,
            )
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

    @admin.action(
        description="Queue a failed task again (only one nothing was paid for)",
        permissions=["change"],
    )
    def requeue_tasks(self, request: HttpRequest, queryset: QuerySet[Task]) -> None:
        def queued(request: HttpRequest, task: Task) -> None:
            said = "failed → queued; nothing had been paid for it, so its next send is its "
            self.report(request, task, said + "first paid job.", messages.SUCCESS)

        self._each(
            request,
            queryset,
            lambda task: engine.requeue(task=task),
            engine.RequeueRefused,
            refused="not queued again.",
            moved="moved while being queued again; nothing written.",
            done=queued,
        )

    @admin.action(
        description="Ask Ember again to let go of its copy (a release it did not confirm)",
        permissions=["change"],
    )
    def release_again(self, request: HttpRequest, queryset: QuerySet[Task]) -> None:
        self._each(
            request,
            queryset,
            lambda task: engine.release_again(task=task),
            engine.ReleaseRefused,
            refused="Ember was not asked.",
            moved="moved while Ember was asked; its answer is not kept.",
            done=self._report_release,
        )

    def _each(
        self,
        request: HttpRequest,
        queryset: QuerySet[Task],
        act: Callable[[Task], Task],
        refusal: type[Exception],
        *,
        refused: str,
        moved: str,
        done: Callable[[HttpRequest, Task], None],
    ) -> None:
        """Run `act` on each task and report: refused (and why), moved meanwhile, or `done`."""
        for task in queryset:
            try:
                task = act(task)
            except refusal as exc:
                self.report(request, task, f"{refused} {exc}", messages.WARNING)
            except Conflict:
                self.report(request, task, moved, messages.ERROR)
            else:
                done(request, task)

    def _report_release(self, request: HttpRequest, task: Task) -> None:
        if task.protection_released:
            self.report(
                request, task, "Ember confirmed: it may let go of its copy.", messages.SUCCESS
            )
        else:
            self.report(
                request,
                task,
                "Ember did not confirm again; it keeps its protected copy. Ask again later.",
                messages.WARNING,
            )
