"""Avatars keeps its promises whatever Ember, the worker and people do, in any order.

A Hypothesis state machine (tests/property_machine.py) drives the real engine and
worker against an in-process Ember with its own ledger (tests/ember_model.py).
Ember's behaviour is drawn request by request; the worker may die at any request;
time moves only when a rule says so. After every step the machine's invariants are
checked against Ember's ledger, the database and the originals on disk. A failure
prints the shrunk list of steps.

`make soak` runs many more examples (HYPOTHESIS_PROFILE=soak).
"""

import pytest
from hypothesis import settings
from hypothesis.stateful import get_state_machine_test

from studio.models import TaskState
from tests.property_machine import AvatarsMachine

# The machine's own Hypothesis test (what `run_state_machine_as_test` runs), collected by
# pytest as it is so that `--hypothesis-show-statistics` can report on it. Each example
# rolls its own transaction back inside the test's (see `AvatarsMachine.__init__`).
test_it_keeps_every_promise_whatever_ember_the_worker_and_people_do = pytest.mark.usefixtures("db")(
    get_state_machine_test(AvatarsMachine, settings=settings())
)


@pytest.mark.django_db
def test_it_keeps_the_ledger_when_the_worker_adopts_a_lost_submit() -> None:
    """The machine's own steps, in the order that exercises adoption without a person."""
    machine = AvatarsMachine()
    try:
        machine.plan(["image"], 1)
        machine.ember.will("submit", "lose_answer")  # Ember makes and charges the job
        machine.work(5)
        [task_id] = machine.in_states(TaskState.UNCERTAIN)

        machine.search_history(wait=301)
        machine.work(5)

        assert machine.in_states(TaskState.DONE) == [task_id]
        assert machine.ember.charges[task_id] == 1
        machine.charges()
        machine.originals()
        machine.truth()
        machine.no_promise_was_broken_during_a_step()
    finally:
        machine.teardown()


@pytest.mark.django_db
def test_it_keeps_the_ledger_when_a_confirmation_is_posted_again() -> None:
    """Found by a review: the replayed confirmation paid for a send nobody had looked at."""
    machine = AvatarsMachine()
    try:
        machine.plan(["image"], 1)
        machine.ember.will("submit", "lose_answer")  # attempt 1 is paid; its answer is lost
        machine.work(5)
        [task_id] = machine.in_states(TaskState.UNCERTAIN)
        machine.resubmit(task_id)
        machine.ember.will("submit", "lose_answer")  # so is attempt 2, the resubmit
        machine.work(5)
        assert machine.in_states(TaskState.UNCERTAIN) == [task_id]

        machine.post_again(task_id)
        machine.work(5)

        assert machine.ember.charges[task_id] == 2
        machine.charges()
        machine.truth()
        machine.no_promise_was_broken_during_a_step()
    finally:
        machine.teardown()


@pytest.mark.django_db
def test_a_replayed_example_plans_the_same_ids() -> None:
    """The engine breaks some ties by id: a replay must meet the same ids to take the same path."""
    planned = []
    for _ in range(2):
        machine = AvatarsMachine()
        try:
            machine.plan(["image"], 2)
            planned.append(list(machine.tasks))
        finally:
            machine.teardown()
    assert planned[0] == planned[1], f"the same steps planned {planned[0]} then {planned[1]}"
