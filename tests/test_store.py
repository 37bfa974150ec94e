"""Versioned writes (studio/store.py): the compiled UPDATE writes what Django's own would.

`update` puts each versioned UPDATE together from the fields' conversions instead of
compiling a query. Two identical tasks get the same values, one through `update`, the
other through `QuerySet.update`: their rows must read back the same, column by column,
for any mix of the columns the worker and the services write.
"""

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.db.models import F
from django.test.utils import CaptureQueriesContext
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from studio.models import ACTIVE, Asset, Task, TaskState
from studio.store import Conflict, move, update
from tests.factories import generated_asset, plan

pytestmark = pytest.mark.django_db

# PostgreSQL keeps no NUL in text or JSON (on either path): the only character left out.
CHARACTERS = st.characters(exclude_characters="\x00", exclude_categories=("Cs",))
TEXT = st.text(CHARACTERS, max_size=40)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)
MOMENTS = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
)
# Every kind of column a state change writes: text, enum, JSON (or NULL), booleans that
# may be NULL, datetimes that may be NULL, a foreign key given as a row or as None.
# (A state comes with its due time, as `move` writes them: the table's check wants both.)
FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "state": st.sampled_from(list(TaskState)),
    "phase": TEXT,
    "error": st.text(CHARACTERS, max_size=300),
    "ember_job_id": TEXT,
    "result": JSON,
    "protection_released": st.none() | st.booleans(),
    "submitted_at": st.none() | MOMENTS,
    "asset": st.sampled_from(["asset", None]),
}
CHANGES = st.lists(st.fixed_dictionaries({}, optional=FIELDS).filter(bool), min_size=1, max_size=4)
COMPARED = [f.attname for f in Task._meta.concrete_fields if f.attname not in ("id", "updated_at")]


@pytest.fixture
def twins(subject) -> tuple[tuple[Task, Asset], tuple[Task, Asset]]:
    """Two tasks alike (ids, ordinals and keys aside), each with an asset it may point at."""
    first, second = plan(subject, candidates=2)
    return (first, generated_asset()), (second, generated_asset())  # one to one: one each


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(changes=CHANGES)
def test_the_compiled_write_leaves_the_row_djangos_update_leaves(twins, changes) -> None:
    (ours, our_asset), (theirs, their_asset) = twins
    assets = {ours.pk: our_asset, theirs.pk: their_asset}
    due = datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    for change in changes:
        if "state" in change:
            change["next_attempt_at"] = due if change["state"] in ACTIVE else None
        expected = ours.version
        update(ours, expected=expected, **_with(change, assets[ours.pk]))
        Task.objects.filter(pk=theirs.pk).update(
            version=F("version") + 1, **_with(change, assets[theirs.pk])
        )
        assert ours.version == expected + 1, "the object keeps the version it wrote"
    mine, django = (_row(task, assets[task.pk]) for task in (ours, theirs))
    assert mine == django
    assert Task.objects.get(pk=ours.pk).version == ours.version


def _with(change: dict[str, Any], asset: Asset) -> dict[str, Any]:
    return {name: (asset if value == "asset" else value) for name, value in change.items()}


def _row(task: Task, asset: Asset) -> dict[str, Any]:
    """Return the task's row as read back, its own asset named "asset", its own ids left out."""
    row = Task.objects.filter(pk=task.pk).values(*COMPARED).get()
    for name in ("ordinal", "idempotency_key", "created_at"):  # the twins differ here from birth
        row.pop(name)
    row["asset_id"] = "asset" if row["asset_id"] == asset.pk else row["asset_id"]
    return row


def test_a_write_is_one_statement_and_keeps_the_object_in_step(subject) -> None:
    (task,) = plan(subject)
    with CaptureQueriesContext(connection) as queries:
        move(task, TaskState.RUNNING, expected=task.version, ember_job_id="job_1", phase="Ember")
    writes = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("UPDATE")]
    assert len(writes) == 1 and len(queries.captured_queries) == 1, queries.captured_queries
    fresh = Task.objects.get(pk=task.pk)
    assert (fresh.state, fresh.ember_job_id, fresh.version) == ("running", "job_1", task.version)
    assert fresh.next_attempt_at is not None and fresh.updated_at == task.updated_at


def test_a_stale_version_writes_nothing_and_says_so(subject) -> None:
    (task,) = plan(subject)
    stale = Task.objects.get(pk=task.pk)
    move(task, TaskState.CANCELLED, expected=task.version, phase="Cancelled")
    with pytest.raises(Conflict):
        move(stale, TaskState.PREPARING, expected=stale.version, phase="Checking")
    fresh = Task.objects.get(pk=task.pk)
    assert (fresh.state, fresh.phase, fresh.version) == ("cancelled", "Cancelled", task.version)


def test_an_unversioned_write_lands_on_a_row_someone_else_moved(subject) -> None:
    """Without `expected` the write records something that must not be lost: it always lands."""
    (task,) = plan(subject)
    Task.objects.filter(pk=task.pk).update(version=F("version") + 5)
    update(task, error="Ember's answer")
    fresh = Task.objects.get(pk=task.pk)
    assert fresh.error == "Ember's answer" and fresh.version == task.version
    assert fresh.version == 1 + 5 + 1


def test_an_expression_goes_through_djangos_compiler(subject) -> None:
    (task,) = plan(subject)
    before = task.updated_at
    later = before + timedelta(hours=1)
    update(task, expected=task.version, submitted_at=later, ordinal=F("ordinal") + 10)
    fresh = Task.objects.get(pk=task.pk)
    assert fresh.ordinal == 11 and fresh.submitted_at == later


def test_a_foreign_key_is_written_from_the_row_or_cleared(subject) -> None:
    (task,) = plan(subject)
    asset = generated_asset()
    update(task, asset=asset)
    assert Task.objects.get(pk=task.pk).asset_id == asset.pk
    update(task, asset=None)
    assert Task.objects.get(pk=task.pk).asset_id is None


def test_a_row_that_is_gone_is_not_written_silently(subject) -> None:
    asset = generated_asset()
    Asset.objects.filter(pk=asset.pk).delete()
    with pytest.raises(Asset.DoesNotExist):
        update(asset, label="gone")
