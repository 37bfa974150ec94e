"""The task admin's repairs: each calls a service and reports, task by task, what it did."""

from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.utils import timezone

from studio import engine
from studio.admin.base import VersionedAdmin
from studio.ember.client import EmberError
from studio.models import POLL_BOUND, RECONCILABLE, Task, TaskState
from studio.store import Conflict

NOT_RECEIVED = "I checked Ember and it did not receive this"


def task_name(task: Task) -> str:
    """Name a task in a message: short id, then what it is."""
    return f"Task {str(task.pk)[:8]} ({task.provider} {task.frame} #{task.ordinal})"


class TaskRepairs(VersionedAdmin):
    """The repair actions of the task admin, apart from how tasks are listed and shown."""

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
        return self._resubmit_confirmation(request, tasks)

    def _resubmit_confirmation(self, request: HttpRequest, tasks: list[Task]) -> TemplateResponse:
        """Ask, with the warning, which tasks a person checked in Ember."""
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
