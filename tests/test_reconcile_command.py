"""`manage.py reconcile`'s exit code: a scheduled run alerts when Ember could not be asked."""

import io

import httpx
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from studio import originals
from studio.management.commands.reconcile import AWAY_IN_A_ROW
from studio.models import TaskState
from studio.phrases import GONE_PHASE
from studio.store import move
from tests.factories import (
    a_task,
    ember_result,
    history_route,
    history_row,
    png_bytes,
    resubmitted_and_done,
    uncertain,
)
from tests.task_rows import row_of

pytestmark = pytest.mark.django_db

HISTORY = "/api/v1/history"
WRONG_TOKEN = {"error": {"message": "Missing or wrong bearer token."}}


def run_reconcile(*args: str) -> tuple[str, CommandError | None]:
    """Run the command as cron would; return what it printed and the error it ended with."""
    out = io.StringIO()
    try:
        call_command("reconcile", *args, stdout=out)
    except CommandError as exc:
        return out.getvalue(), exc
    return out.getvalue(), None


def test_it_exits_non_zero_when_ember_refuses_the_token(subject, ember):
    """Found by a review: a wrong EMBER_TOKEN printed the refusal per task and exited 0."""
    task = uncertain(a_task(subject))
    ember.get(HISTORY).respond(401, json=WRONG_TOKEN)

    said, ended = run_reconcile("--all")

    assert ended is not None and ended.returncode == 1
    assert "Ember could not be asked about 1 task" in str(ended)
    assert f"{task.pk} uncertain: Ember's history could not be read: " in said, said
    assert "left as it is" in said and ".;" not in said, said
    assert row_of(task).phase == task.phase == "Reconcile before retry"  # not written over
    assert said.splitlines()[-1] == (
        "1 task: 0 handed back to the worker, 0 left as Ember's history says, "
        "0 moved meanwhile, 1 Ember could not be asked about."
    )


def test_it_exits_non_zero_when_ember_cannot_be_reached(subject, ember):
    first, second = uncertain(a_task(subject)), uncertain(a_task(subject))
    ember.get(HISTORY).mock(side_effect=httpx.ConnectError("connection refused"))

    said, ended = run_reconcile(str(first.pk), str(second.pk))

    assert ended is not None and ended.returncode == 1
    assert "Ember could not be asked about 2 tasks" in str(ended)
    assert said.splitlines()[-1].endswith("2 Ember could not be asked about.")
    assert row_of(first).state == row_of(second).state == TaskState.UNCERTAIN


def test_one_task_ember_could_not_be_asked_about_fails_the_whole_run(subject, ember):
    found, unasked = uncertain(a_task(subject)), uncertain(a_task(subject))
    history_route(ember, found, [history_row(found)])
    ember.get(HISTORY, params={"task_id": str(unasked.pk)}).respond(503)

    said, ended = run_reconcile("--all")

    assert ended is not None and ended.returncode == 1
    assert row_of(found).state == TaskState.COPYING
    assert said.splitlines()[-1] == (
        "2 tasks: 1 handed back to the worker, 0 left as Ember's history says, "
        "0 moved meanwhile, 1 Ember could not be asked about."
    )


def test_a_task_ember_has_no_row_for_yet_is_left_where_it_is_and_exits_zero(subject, ember):
    task = uncertain(a_task(subject))
    history_route(ember, task, [])

    said, ended = run_reconcile("--all")

    assert ended is None
    assert row_of(task).state == TaskState.UNCERTAIN
    assert said.splitlines()[-1] == (
        "1 task: 0 handed back to the worker, 1 left as Ember's history says, "
        "0 moved meanwhile, 0 Ember could not be asked about."
    )


def test_one_task_named_twice_in_two_spellings_is_reconciled_once(subject, ember):
    """Found by a review: the same id in upper and lower case was an "Unknown task"."""
    task = uncertain(a_task(subject))
    history_route(ember, task, [history_row(task)])

    said, ended = run_reconcile(str(task.pk).upper(), str(task.pk))

    assert ended is None, ended
    assert row_of(task).state == TaskState.COPYING
    assert said.count(f"{task.pk} uncertain -> copying") == 1


def test_an_unknown_id_is_named_as_it_was_written(subject):
    missing = "9B2D3C1E-0000-4000-8000-000000000000"

    _said, ended = run_reconcile(missing)

    assert ended is not None and str(ended) == f"Unknown task: {missing}"


@pytest.mark.parametrize(
    ("written", "said"),
    [
        ("nope", "Not a task id: 'nope'"),
        # Cut: a review's 100,000-character argument came back whole.
        ("x" * 100_000, f"Not a task id: '{'x' * 78}…"),
    ],
    ids=["short", "huge"],
)
def test_what_is_no_task_id_is_named_and_cut_to_a_line(written, said):
    _said, ended = run_reconcile(written)

    assert ended is not None and str(ended) == said


def test_all_with_nothing_to_reconcile_says_so_and_asks_ember_nothing(subject, ember):
    """Found by a review: `reconcile --all` on a quiet install printed nothing at all."""
    a_task(subject)  # queued: the worker's, not reconcile's

    out, failed = run_reconcile("--all")

    assert failed is None
    assert out.strip() == (
        "No task needs reconciling (none is uncertain, history_missing or copy_failed)."
    )
    assert len(ember.calls) == 0


def copy_failed(subject, phase: str):
    task = a_task(subject)
    return move(task, TaskState.COPY_FAILED, phase=phase, result=ember_result(), ember_job_id="j1")


def test_it_exits_non_zero_when_it_hands_back_a_copy_ember_said_it_no_longer_has(subject, ember):
    """Found by the operators' review: a nightly `reconcile --all` handed back a paid
    original Ember had said it no longer has and exited 0; the worker failed it again at
    once, so an alert on the exit code never heard of the lost original."""
    gone = copy_failed(subject, GONE_PHASE)
    failed = copy_failed(subject, "The copy from Ember failed; reconcile to retry")

    said, ended = run_reconcile("--all")

    assert row_of(gone).state == row_of(failed).state == TaskState.COPYING  # tried again
    assert said.splitlines()[-1].startswith("2 tasks: 2 handed back to the worker")
    assert ended is not None and ended.returncode == 1, said
    assert str(ended) == (
        "1 task handed back had last failed because Ember said it no longer has its image: "
        "it is copied only if Ember has it back, or from the archive once its file is put "
        "back there (check_originals --repair --from-backup SRC, from a backup that holds "
        "it); check its image id with Ember."
    )
    assert len(ember.calls) == 0  # a saved answer is copied again, not looked up


def test_a_copy_that_failed_otherwise_is_handed_back_and_exits_zero(subject, ember):
    copy_failed(subject, "The copy from Ember failed; reconcile to retry")

    said, ended = run_reconcile("--all")

    assert ended is None, said


def test_a_copy_whose_original_is_back_in_the_archive_is_no_alert(subject, ember):
    """Found by a re-review: once `check_originals --repair --from-backup` had put the bytes
    back, `reconcile --all` still exited 1 over them, though the worker's copy takes them."""
    data = png_bytes(5, fmt="JPEG")
    gone = a_task(subject)
    result = ember_result("img_5", "hist_5", data=data)  # Ember's word: a PNG
    move(gone, TaskState.COPY_FAILED, phase=GONE_PHASE, result=result, ember_job_id="j5")
    originals.save(data)  # put back; the archive names it by what it is: .jpg

    said, ended = run_reconcile("--all")

    assert ended is None, str(ended)
    assert said.splitlines()[-1].startswith("1 task: 1 handed back to the worker"), said
    assert row_of(gone).state == TaskState.COPYING


def test_once_ember_cannot_be_asked_it_asks_about_none_of_the_rest(subject, ember):
    """Found by a review: against an Ember that never answered, `--all` waited out each
    question's deadline in turn (30 s a task; 15 minutes for 30 tasks)."""
    tasks = [uncertain(a_task(subject)) for _ in range(5)]
    asked = ember.get(HISTORY).mock(side_effect=httpx.ReadTimeout("no answer"))

    said, ended = run_reconcile("--all")

    assert asked.call_count == AWAY_IN_A_ROW, f"{asked.call_count} questions to a hung Ember"
    assert ended is not None and ended.returncode == 1
    assert "Ember could not be asked about 5 tasks" in str(ended)
    assert "Ember was not asked about the other 2 tasks, left as they are." in said, said
    assert said.splitlines()[-1].endswith("5 Ember could not be asked about.")
    assert {row_of(task).state for task in tasks} == {TaskState.UNCERTAIN}


def test_an_answer_about_one_task_does_not_stop_the_others_being_asked(subject, ember):
    """Found by a re-review: an unusable answer about the oldest task (Ember did answer)
    stopped every run before the others, each saying to run again when Ember answers."""
    first = resubmitted_and_done(subject)  # done, its first send's answer lost
    second = uncertain(a_task(subject))
    ember.get(HISTORY, params={"task_id": str(first.pk)}).respond(200, content=b"not json")
    history_route(ember, second, [history_row(second)])

    said, ended = run_reconcile(str(first.pk), str(second.pk))

    assert "Ember was not asked about the other" not in said, said
    assert row_of(second).state == TaskState.COPYING
    assert ended is not None and "Ember could not be asked about 1 task" in str(ended), said


def test_one_5xx_between_answers_does_not_stop_the_others_being_asked(subject, ember):
    """Found by a review with a flaky Ember double (one history read in ten a 500): each
    run stopped at its first 500, and the later tasks were never reached."""
    first, *rest = [uncertain(a_task(subject)) for _ in range(4)]
    ember.get(HISTORY, params={"task_id": str(first.pk)}).respond(500, json={"error": {}})
    for n, task in enumerate(rest):
        history_route(ember, task, [history_row(task, f"job_{n}", f"img_{n}", f"hist_{n}")])

    said, ended = run_reconcile("--all")

    assert "Ember was not asked about the other" not in said, said
    assert [row_of(task).state for task in rest] == [TaskState.COPYING] * 3, said
    assert ended is not None and "Ember could not be asked about 1 task" in str(ended)
