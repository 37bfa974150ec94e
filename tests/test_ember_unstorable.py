"""Ember's answers that JSON can say and no database stores (found by a review with an Ember
double of its own): a lone surrogate or NUL in a string, NaN, an infinity, a number past
a double's range. Each left a task where nothing moved it, or stopped `reconcile --all`.
"""

import io
import json
from typing import Any

import httpx
import pytest
from django.core.management import CommandError, call_command
from hypothesis import given
from hypothesis import strategies as st

from studio.ember.answers import Reply, json_object
from studio.ember.errors import EmberBadAnswer
from studio.models import Asset, TaskState
from studio.store import move
from studio.worker import Worker
from tests.factories import drain, plan
from tests.fake_ember import FakeEmber

pytestmark = pytest.mark.django_db

ODD = st.sampled_from(["\ud800", "\udfff", "a\ud83d", "\x00", "\ufffd", "é", "\U0001f600"])
TEXT = st.lists(st.one_of(st.text(max_size=5), ODD), max_size=4).map("".join)
ANSWERS = st.recursive(
    st.one_of(TEXT, st.integers(), st.floats(allow_nan=False, allow_infinity=False), st.none()),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=12,
)


def strings_of(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for item in value for s in strings_of(item)]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in [*strings_of(k), *strings_of(v)]]
    return []


def read(body: bytes) -> Any:
    return Reply(200, httpx.Headers(), body).json()


@given(ANSWERS)
def test_every_string_read_from_ember_is_one_a_database_stores(answer):
    read_back = read(json.dumps(answer).encode())  # escaped, as JSON lets Ember send it

    for text in strings_of(read_back):
        assert "\x00" not in text, ascii(text)
        text.encode("utf-8")  # a lone surrogate raises here
    if all(s.isprintable() or s == "" for s in strings_of(answer)) and not any(
        "\x00" in s or any("\ud800" <= c <= "\udfff" for c in s) for s in strings_of(answer)
    ):
        assert read_back == answer  # what stores as it is, is kept as it is


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999", "-1e999"])
def test_a_number_no_database_keeps_is_an_answer_that_cannot_be_used(number):
    body = f'{{"id": "job_1", "status": "succeeded", "result": {{"width": {number}}}}}'

    with pytest.raises(EmberBadAnswer, match="not JSON"):
        json_object(Reply(200, httpx.Headers(), body.encode()))


def test_a_refusal_whose_message_holds_a_lone_surrogate_is_retried_not_stranded(
    subject, ember, worker
):
    """A 429 that proves nothing was accepted: once left `submitting`, then `uncertain`."""
    fake = FakeEmber(ember)
    fake.submit_route.mock(
        return_value=httpx.Response(
            429,
            content=b'{"error": {"code": "busy", "message": "\\ud800 busy\\u0000"}}',
            headers={"Content-Type": "application/json", "Retry-After": "60"},
        )
    )
    [task] = plan(subject)

    drain(Worker(client=worker.client, workers=1, poll_interval=0, tick=0))

    task.refresh_from_db()
    assert task.state == TaskState.QUEUED, (task.state, task.phase, task.error)
    assert "\ufffd busy\ufffd" in task.error
    assert len(fake.submits) == 0  # nothing was accepted, nothing charged


def test_a_job_answer_with_a_number_past_a_double_keeps_polling_and_says_so(subject, ember, worker):
    fake = FakeEmber(ember)
    [task] = plan(subject)
    fake.poll_route.mock(
        return_value=httpx.Response(
            200,
            content=b'{"id": "job_1", "status": "succeeded", "result": {"width": 1e999}}',
            headers={"Content-Type": "application/json"},
        )
    )

    drain(Worker(client=worker.client, poll_interval=0.01, poll_bound=0.3, tick=0))

    task.refresh_from_db()
    assert task.state == TaskState.UNCERTAIN, (task.state, task.phase, task.error)
    assert "did not finish" in task.error and "not JSON" in task.error
    assert len(fake.submits) == 1


def test_history_error_and_metadata_past_their_columns_are_kept_as_far_as_they_go(
    subject, ember, worker
):
    fake = FakeEmber(ember)
    [task] = plan(subject)
    poll = fake._poll

    def odd(request, job_id):
        answer = json.loads(poll(request, job_id).content)
        answer["result"]["history"] = None
        answer["result"]["history_error"] = "history \ud800 down"
        answer["result"]["image"]["metadata"] = {"model": "m" * 200, "provider": "p" * 90}
        return httpx.Response(200, content=json.dumps(answer).encode())

    fake.poll_route.mock(side_effect=odd)

    drain(Worker(client=worker.client, poll_interval=0, tick=0))

    task.refresh_from_db()
    assert task.state == TaskState.HISTORY_MISSING, (task.state, task.phase, task.error)
    assert task.error == "history \ufffd down"
    asset = Asset.objects.get(task=task)
    assert (asset.model, asset.provider) == ("m" * 120, "p" * 60)
    assert fake.release_route.call_count == 1


def reconcile_all_with(ember, subject, unreadable_answer) -> tuple[str, str, FakeEmber]:
    """Reconcile three uncertain tasks, the first one's history answered as given."""
    fake = FakeEmber(ember)
    tasks = plan(subject, candidates=3)
    for task in tasks:
        move(task, TaskState.UNCERTAIN, phase="Reconcile before retry")
    first = str(tasks[0].pk)
    history = fake._history

    def answer(request):
        if request.url.params["task_id"] == first:
            return unreadable_answer(request)
        return history(request)

    fake.history_route.mock(side_effect=answer)
    out = io.StringIO()
    ended = ""
    try:
        call_command("reconcile", "--all", stdout=out)
    except CommandError as exc:
        ended = str(exc)
    return out.getvalue(), ended, fake


def test_reconcile_all_goes_on_past_a_task_whose_history_cannot_be_stored(subject, ember):
    def unstorable(request):
        return httpx.Response(200, content=b'{"items": [{"result": {"width": 1e999}}]}')

    said, ended, fake = reconcile_all_with(ember, subject, unstorable)

    assert "uncertain -> uncertain: Ember's history could not be read" in said, said
    assert fake.history_route.call_count == 3, "the tasks after it were never asked"
    assert said.count("uncertain -> uncertain") == 3, said
    assert ended == ""
