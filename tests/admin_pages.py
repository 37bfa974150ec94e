"""Reading and driving the admin as a person does, for the admin tests (Django's test client)."""

import html
from html.parser import HTMLParser
from typing import Any

import httpx
from django.urls import reverse

from studio.models import Task

TOO_LATE = "This task has already been sent to Ember; the work is kept."
RESUBMIT_WARNING = "Resubmitting may pay for a second generation: Ember may already have this job."
TOO_EARLY = (
    "Ember may still be working on the last submit. Wait until the poll bound has passed "
    "since it was sent, or confirm that you checked Ember and it did not receive this."
)
NOT_RECEIVED = "I checked Ember and it did not receive this"


# --- the cast -------------------------------------------------------------------------


def serve_history(ember, rows_by_task: dict[str, list[dict[str, Any]]]):
    """Answer Ember's history route with these rows per task id (none for the others)."""

    def answer(request: httpx.Request) -> httpx.Response:
        rows = rows_by_task.get(request.url.params["task_id"], [])
        return httpx.Response(200, json={"items": rows})

    return ember.get("/api/v1/history").mock(side_effect=answer)


def row_of(obj: Any) -> Any:
    return type(obj).objects.get(pk=obj.pk)


def changelist(model: type) -> str:
    return reverse(f"admin:studio_{model._meta.model_name}_changelist")


def change_page(obj: Any) -> str:
    return reverse(f"admin:studio_{obj._meta.model_name}_change", args=[obj.pk])


def run_action(client, model: type, action: str, objs: list[Any], **extra: Any):
    """Select `objs` on the changelist and run `action`; follow to the page with its messages."""
    data = {"action": action, "_selected_action": [str(o.pk) for o in objs], "index": "0"}
    data.update(extra)
    return client.post(changelist(model), data, follow=True)


def said(response) -> list[str]:
    """The messages a person sees on the page."""
    return [str(m) for m in response.context["messages"]]


def text(response) -> str:
    return html.unescape(response.content.decode())


def one_message_about(response, task: Task) -> str:
    [message] = [m for m in said(response) if m.startswith(f"Task {str(task.pk)[:8]} ")]
    return message


class _FormFields(HTMLParser):
    """Collect what a browser would submit from one form on a page."""

    def __init__(self, form_id: str) -> None:
        super().__init__()
        self.form_id = form_id
        self.inside = False
        self.data: dict[str, list[str]] = {}
        self._textarea: str | None = None
        self._select: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form":
            self.inside = a.get("id") == self.form_id
        if not self.inside:
            return
        name = a.get("name", "")
        if tag == "input" and name:
            kind = a.get("type", "text")
            unchecked = kind in ("checkbox", "radio") and "checked" not in a
            if kind not in ("submit", "button", "file") and not unchecked:
                self.data.setdefault(name, []).append(a.get("value", "on"))
        elif tag == "textarea" and name:
            self._textarea = name
            self.data[name] = [""]
        elif tag == "select" and name:
            self._select = name
            self.data[name] = [""]
        elif tag == "option" and self._select and "selected" in a:
            self.data[self._select] = [a.get("value", "")]

    def handle_data(self, data: str) -> None:
        if self._textarea:
            self.data[self._textarea][0] += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "textarea":
            self._textarea = None
        elif tag == "select":
            self._select = None
        elif tag == "form":
            self.inside = False


def form_on(response, form_id: str) -> dict[str, list[str]]:
    """What the form would send if a person submitted it without touching it."""
    parser = _FormFields(form_id)
    parser.feed(response.content.decode())
    assert parser.data, f"no form {form_id!r} on the page"
    return parser.data


def form_of(response, model: type) -> dict[str, list[str]]:
    """What the change form would send if a person pressed Save without touching it."""
    return form_on(response, f"{model._meta.model_name}_form")


def resubmit(client, tasks: list[Task], *, not_received: tuple[Task, ...] = ()):
    """Choose "resubmit" for `tasks`, tick the check for `not_received`, and confirm."""
    page = run_action(client, Task, "resubmit_tasks", tasks)
    form = form_on(page, "resubmit_form")
    form["not_received"] = [str(t.pk) for t in not_received]
    return client.post(changelist(Task), form, follow=True)
