"""The stateful property test's machine: people, Ember and the worker in any order.

Its rules are what people, Ember and the worker may do; its invariants, checked
after every step, are the promises Avatars keeps. tests/test_properties.py runs it.
"""

import contextlib
import os
import shutil
import tempfile
from collections import Counter
from pathlib import Path

from asgiref.sync import async_to_sync
from django.db import connection, transaction
from django.test import override_settings
from django.utils import timezone
from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from studio import engine, originals
from studio.ember.answers import MAX_RETRY_AFTER
from studio.ember.client import EmberClient, EmberError
from studio.engine.lost_sends import reconcilable
from studio.models import ACTIVE, Asset, AvatarSet, Origin, Task, TaskState
from studio.worker import Worker
from tests.ember_model import HISTORY, Clock, Death, EmberModel
from tests.factories import EMBER, png_bytes
from tests.machine_parts import (
    DRIVES_PER_RULE,
    FRAMES,
    KNOWN_HOLES,
    MAX_TASKS,
    OUTAGES,
    RESTING,
    SAVES,
    WORKER_ROUTES,
    Decisions,
    Disk,
    ProbedWorker,
    drawable,
    every_paid_original_is_held_or_named,
    seeded_ids,
)


class AvatarsMachine(Decisions, RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        # Each example starts from an empty database, a fresh data dir and its own clock.
        self._atomic = transaction.atomic()
        self._atomic.__enter__()
        self._data_dir = Path(tempfile.mkdtemp(prefix="avatars-props-"))
        self._settings = override_settings(AVATARS_DATA_DIR=self._data_dir)
        self._settings.enable()
        self._real_ids = seeded_ids()  # ties broken by id go the same way on every replay
        self.clock = Clock(timezone.now())
        self._real_now = timezone.now
        timezone.now = self.clock.now  # type: ignore[assignment]  # everyone reads this clock
        self.disk = Disk()
        self._real_fsync, self._real_replace = os.fsync, os.replace
        os.fsync, os.replace = self.disk.fsync, self.disk.replace

        self.subject = engine.create_subject(name="Ada")
        photos = [png_bytes(seed) for seed in (9001, 9002)]
        for n, data in enumerate(photos):
            engine.add_reference(subject=self.subject, data=data, file_name=f"ada-{n}.png")
        self.ember = EmberModel(clock=self.clock, references=photos)
        self.client = EmberClient(base_url=EMBER, token="t", transport=self.ember.transport())
        self.worker = self.new_worker()
        self.tasks: list[str] = []  # task ids in the order they were planned
        self.sets: list[int] = []
        self.prepare: list[str] = []
        self.resubmits: Counter[str] = Counter()  # a person's confirmed resubmits per task
        self.confirmations: dict[str, int] = {}  # task id -> the version its form showed
        self.cancelled: set[str] = set()  # tasks a cancel reported cancelled
        self.published: dict[int, list[int]] = {}  # set id -> its assets when published
        self.broken: list[str] = []  # promises broken during a step, said in words
        self.outage = 1  # seconds a dead worker stays down

    def teardown(self) -> None:
        timezone.now = self._real_now  # type: ignore[method-assign]
        self._real_ids()
        os.fsync, os.replace = self._real_fsync, self._real_replace
        transaction.set_rollback(True)
        self._atomic.__exit__(None, None, None)
        self._settings.disable()
        shutil.rmtree(self._data_dir, ignore_errors=True)

    def new_worker(self) -> Worker:
        return ProbedWorker(
            machine=self, client=self.client, workers=1, poll_interval=0, tick=0,
            fetch_retry_delay=0,
        )  # fmt: skip

    # --- helpers -------------------------------------------------------------------

    def in_states(self, *states: TaskState) -> list[str]:
        rows = Task.objects.filter(pk__in=self.tasks).values_list("pk", "state")
        state = {str(pk): value for pk, value in rows}
        return [t for t in self.tasks if state[t] in states]

    def due(self) -> list[str]:
        due = {str(task.pk) for task in self.worker._due_query(timezone.now())}
        return [t for t in self.tasks if t in due]

    def restart(self) -> None:
        """The worker died: in-flight work is gone; a new one wakes up after the outage."""
        self.clock.advance(self.outage)
        self.worker = self.new_worker()
        self.worker.recover()

    def drive(self, task_id: str) -> None:
        """Let the worker drive one task as far as it goes; a death restarts the worker."""
        before = self.task(task_id)
        polls = self.ember.polled[before.ember_job_id]
        try:
            async_to_sync(self.worker.drive)(task_id)
        except Death:
            self.restart()
            return
        after = self.task(task_id)
        gave_up = before.state == TaskState.RUNNING and after.state == TaskState.UNCERTAIN
        if gave_up and self.ember.polled[before.ember_job_id] == polls and 2 not in KNOWN_HOLES:
            job = self.ember.jobs.get(before.ember_job_id)
            done = job is not None and job.finished(self.clock.now())
            self.broken.append(
                f"task {task_id} was given up as uncertain without polling its job "
                f"{before.ember_job_id} ({'which had finished' if done else 'still running'})"
            )

    def work(self, limit: int) -> None:
        for _ in range(limit):
            due = self.due()
            if not due:
                return
            self.drive(due[0])

    def snapshot(self, set_id: int) -> None:
        """Remember what a set held when it was published: it must never change after."""
        avatar_set = AvatarSet.objects.get(pk=set_id)
        if avatar_set.published_at is not None and set_id not in self.published:
            self.published[set_id] = list(avatar_set.items.values_list("asset_id", flat=True))

    def assets(self) -> list[int]:
        return list(Asset.objects.order_by("pk").values_list("pk", flat=True))

    # --- people --------------------------------------------------------------------

    @initialize(frames=FRAMES, candidates=st.integers(1, 2))
    def a_person_plans_the_first_batch(self, frames: list[str], candidates: int) -> None:
        self.plan(frames, candidates)

    @precondition(lambda self: len(self.tasks) < MAX_TASKS)
    @rule(frames=FRAMES, candidates=st.integers(1, 2))
    def a_person_plans_a_batch(self, frames: list[str], candidates: int) -> None:
        self.plan(frames, candidates)

    def plan(self, frames: list[str], candidates: int) -> None:
        request = {
            "prompt": "a friendly portrait, watercolour",
            "subjects": [self.subject.pk],
            "providers": [{"provider": "openai", "candidates": candidates}],
            "frames": frames,
        }
        batch = engine.generate(request=request)
        self.tasks += [
            str(pk) for pk in batch.tasks.order_by("frame", "ordinal").values_list("pk", flat=True)
        ]

    @precondition(lambda self: self.tasks)
    @rule(data=st.data())
    def a_person_cancels_a_task(self, data: st.DataObject) -> None:
        task_id = data.draw(st.sampled_from(self.tasks), label="task")
        self.cancel(task_id)

    @precondition(lambda self: self.tasks)
    @rule(data=st.data())
    def a_person_reconciles_a_task(self, data: st.DataObject) -> None:
        # And a done task with an earlier send nobody looked for (a resubmit's earlier one).
        candidates = [t for t in self.tasks if reconcilable(self.task(t))]
        done = [t for t in candidates if self.task(t).state == TaskState.DONE]
        if candidates:
            task_id = data.draw(st.sampled_from(candidates), label="task")
            self.script(data, {"history": HISTORY})
            task = self.task(task_id)
            before = (task.state, task.phase, task.version)
            try:
                engine.reconcile(task=task, client=self.client)
            except EmberError:  # Ember could not be asked: nothing learned, nothing written
                after = self.task(task_id)
                assert (after.state, after.phase, after.version) == before
            if task_id in done:  # its other paid originals are named on it, nothing more
                after = self.task(task_id)
                assert (after.state, after.phase, after.asset_id) == (
                    task.state,
                    task.phase,
                    task.asset_id,
                ), "a reconcile moved a done task"

    @precondition(lambda self: self.tasks and 1 not in KNOWN_HOLES)
    @rule(data=st.data())
    def a_person_resubmits_an_uncertain_task(self, data: st.DataObject) -> None:
        candidates = self.in_states(TaskState.UNCERTAIN)
        if candidates:
            self.resubmit(data.draw(st.sampled_from(candidates), label="task"))

    @precondition(lambda self: self.confirmations)
    @rule(data=st.data())
    def a_person_posts_a_confirmation_again(self, data: st.DataObject) -> None:
        self.post_again(data.draw(st.sampled_from(sorted(self.confirmations)), label="task"))

    @rule(data=st.data())
    def a_person_makes_a_set(self, data: st.DataObject) -> None:
        chosen = data.draw(st.lists(st.sampled_from(self.assets()), min_size=1, max_size=3,
                                    unique=True), label="assets")  # fmt: skip
        self.sets.append(engine.create_set(name="Family", asset_ids=chosen).pk)

    @precondition(lambda self: self.sets)
    @rule(data=st.data())
    def a_person_changes_a_set(self, data: st.DataObject) -> None:
        set_id = data.draw(st.sampled_from(self.sets), label="set")
        chosen = data.draw(st.lists(st.sampled_from(self.assets()), max_size=3, unique=True))
        with contextlib.suppress(engine.InvalidRequest):
            engine.choose_assets(avatar_set=AvatarSet.objects.get(pk=set_id), asset_ids=chosen)

    @precondition(lambda self: self.sets)
    @rule(data=st.data())
    def a_person_publishes_a_set(self, data: st.DataObject) -> None:
        self.publish(data.draw(st.sampled_from(self.sets), label="set"))

    def publish(self, set_id: int, *, snapshot: bool = True) -> None:
        try:
            engine.publish(avatar_set=AvatarSet.objects.get(pk=set_id))
        except engine.PublishRefused:
            return
        if snapshot:
            self.snapshot(set_id)

    @precondition(lambda self: self.sets and 11 not in KNOWN_HOLES)
    @rule(data=st.data(), publish_wins_the_race=st.booleans())
    def two_people_publish_and_change_a_set_at_once(
        self, data: st.DataObject, publish_wins_the_race: bool
    ) -> None:
        """One person's write lands between the other's check and write."""
        set_id = data.draw(st.sampled_from(self.sets), label="set")
        chosen = data.draw(st.lists(st.sampled_from(self.assets()), max_size=3, unique=True))

        def choose() -> None:
            with contextlib.suppress(engine.InvalidRequest):
                engine.choose_assets(avatar_set=AvatarSet.objects.get(pk=set_id), asset_ids=chosen)

        # Both run on this one connection: a write that lands inside the other's
        # transaction is undone with it when that one rolls back (two real connections
        # would each commit on their own). So what was published is read back after both.
        first, second = (choose, lambda: self.publish(set_id, snapshot=False))
        if publish_wins_the_race:
            first, second = second, first
        interleaved = False

        def before_first_write(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
            nonlocal interleaved
            writes = sql.lstrip().upper().startswith(("UPDATE", "DELETE", "INSERT"))
            if writes and not interleaved and ("avatarset" in sql or "setitem" in sql):
                interleaved = True
                first()
            return execute(sql, params, many, context)

        with connection.execute_wrapper(before_first_write):
            second()
        if not interleaved:
            first()
        if AvatarSet.objects.get(pk=set_id).published_at is not None:
            self.snapshot(set_id)

    # --- Ember, the worker and time -------------------------------------------------

    @rule(stale_nested=st.booleans() if 9 not in KNOWN_HOLES else st.just(False))
    def ember_repairs_its_history(self, stale_nested: bool) -> None:
        self.ember.repair_history(stale_nested=stale_nested)

    def script(self, data: st.DataObject, routes: dict[str, tuple[str, ...]]) -> None:
        """Draw how Ember (and the disk under the worker) will meet the next few requests.

        Drawn here, on the test's thread, because the requests arrive on the worker's
        event loop thread (and fsyncs on a file thread), where Hypothesis cannot draw.
        Whatever is not scripted goes normally.
        """
        self.ember.calm()
        self.prepare.clear()
        self.disk.plan.clear()
        self.outage = data.draw(OUTAGES, label="outage if the worker dies")
        for route, behaviours in routes.items():
            for behaviour in data.draw(st.lists(drawable(route, behaviours), max_size=3), route):
                if route == "prepare":
                    self.prepare.append(behaviour)
                elif route == "save":
                    self.disk.plan += SAVES[behaviour]
                else:
                    self.ember.will(route, behaviour)

    @precondition(lambda self: self.tasks)
    @rule(data=st.data(), steps=st.integers(1, DRIVES_PER_RULE))
    def the_worker_works(self, data: st.DataObject, steps: int) -> None:
        self.script(data, WORKER_ROUTES)
        self.work(steps)

    @precondition(lambda self: self.tasks)
    @rule(data=st.data())
    def the_worker_drives_one_task(self, data: st.DataObject) -> None:
        due = self.due()
        if due:
            task_id = data.draw(st.sampled_from(due), label="task")
            self.script(data, WORKER_ROUTES)
            self.drive(task_id)

    @precondition(lambda self: self.tasks)
    @rule(data=st.data(), wait=st.sampled_from([0, 301]))
    def the_worker_searches_embers_history(self, data: st.DataObject, wait: int) -> None:
        """The worker's own bounded look for lost image submits: no person involved."""
        self.script(data, {"history": HISTORY})
        self.search_history(wait)

    def search_history(self, wait: int) -> list[Task]:
        """Let `wait` seconds pass (301: past AVATARS_ADOPT_EVERY), then run the worker's search."""
        self.clock.advance(wait)
        return async_to_sync(engine.adopt_due)(client=self.client)

    @rule(outage=OUTAGES)
    def the_worker_dies_and_restarts(self, outage: int) -> None:
        self.outage = outage
        self.restart()

    @rule(outage=OUTAGES)
    def the_power_fails(self, outage: int) -> None:
        self.outage = outage
        self.disk.power_loss()
        self.restart()

    @rule(seconds=st.sampled_from([1, 10, 61, 301, 1801, 7200]))
    def time_passes(self, seconds: int) -> None:
        self.clock.advance(seconds)

    @precondition(lambda self: self.tasks)
    @rule(stale_nested=st.booleans() if 9 not in KNOWN_HOLES else st.just(False))
    def ember_recovers_and_everything_settles(self, stale_nested: bool) -> None:
        """With Ember healthy and time passing, every task comes to rest; repairs take."""
        self.ember.calm()
        self.prepare.clear()
        self.disk.plan.clear()
        # A task Ember told to come back later waits at most an hour, however long Ember
        # asked for: after that (and a few minutes of healthy Ember) everything rests.
        self.clock.advance(MAX_RETRY_AFTER)
        for _ in range(3):
            self.clock.advance(61)
            self.work(3 * len(self.tasks))
        # Meanwhile the worker looked up its lost image submits in Ember's history (free).
        adopted = self.search_history(0)
        event(f"the worker's search adopted {sum(t.state in ACTIVE for t in adopted)} task(s)")
        self.work(3 * len(self.tasks))
        self.assert_all_rest("with Ember healthy for an hour and three minutes")
        self.ember.repair_history(stale_nested=stale_nested)
        # Twice: a copy_failed task is copied from its saved answer first, and only a
        # second reconcile asks the history for the row that answer lacked. A done task
        # with an earlier send nobody looked for too: its paid original is named on it.
        for _ in range(2):
            for task_id in [t for t in self.tasks if reconcilable(self.task(t))]:
                engine.reconcile(task=self.task(task_id), client=self.client)
            self.clock.advance(61)
            self.work(3 * len(self.tasks))
        self.assert_all_rest("after Ember repaired its history and every task was reconciled")
        every_paid_original_is_held_or_named(self.ember, self.clock.now())
        for task_id in self.in_states(TaskState.HISTORY_MISSING):
            asset = Asset.objects.get(pk=self.task(task_id).asset_id)
            rows = [j for j in self.ember.jobs.values() if j.image.id == asset.ember_image_id]
            assert not any(j.history_id for j in rows), (
                f"task {task_id} is still history_missing although Ember repaired the history "
                f"row of its image {asset.ember_image_id}"
            )

    def assert_all_rest(self, when: str) -> None:
        stuck = {t: self.task(t).state for t in self.in_states(*ACTIVE)}
        assert not stuck, f"tasks still moving {when}: {stuck}"

    # --- invariants ----------------------------------------------------------------

    @invariant()
    def no_promise_was_broken_during_a_step(self) -> None:
        broken = self.broken + [
            text for hole, text in self.ember.broken_promises if hole not in KNOWN_HOLES
        ]
        assert not broken, broken

    @invariant()
    def charges(self) -> None:
        for task_id in self.tasks:
            paid = self.ember.charges[task_id]
            allowed = 1 + self.resubmits[task_id]
            assert paid <= allowed, (
                f"Ember charged task {task_id} {paid} times; a person confirmed "
                f"{self.resubmits[task_id]} resubmits"
            )
        twice = {key: n for key, n in self.ember.key_charges.items() if n > 1}
        assert not twice, f"clip keys paid more than once: {twice}"

    @invariant()
    def originals(self) -> None:
        for image in self.ember.images.values():
            if not image.released:
                continue
            asset = Asset.objects.filter(ember_image_id=image.id).first()
            assert asset is not None, (
                f"Ember released the protection of {image.id}, an image Avatars never copied"
            )
            path = originals.path_for(asset.sha256, originals.extension_for(asset.mime))
            assert path.is_file(), f"{image.id} was released but {path.name} is not on disk"
            assert str(path) not in self.disk.poisoned | self.disk.pending, (
                f"{image.id} was released but {path.name} was never made durable "
                "(a directory fsync failed after it was renamed in)"
            )
            assert originals.file_sha256(path) == image.sha256 == asset.sha256, (
                f"{image.id} was released but the original on disk is not its bytes"
            )

    @invariant()
    def nothing_paid_is_left_behind_a_failed_task(self) -> None:
        for task in Task.objects.filter(pk__in=self.tasks, state=TaskState.FAILED):
            kept = [job.id for job in self.ember.paid_jobs(str(task.pk)) if not job.fails]
            assert not kept, (
                f"task {task.pk} rests failed ({task.error}) while Ember holds its paid "
                f"job(s) {kept}: nothing reconciles a failed task to collect them"
            )

    @invariant()
    def progress(self) -> None:
        for task in Task.objects.filter(pk__in=self.tasks):
            if task.state in RESTING:
                continue
            assert task.state in ACTIVE and task.next_attempt_at is not None, (
                f"task {task.pk} rests in {task.state!r} ({task.phase}; {task.error}) "
                "where nothing will move it"
            )

    @invariant()
    def truth(self) -> None:
        for asset in Asset.objects.filter(origin=Origin.GENERATED):
            image = self.ember.images.get(asset.ember_image_id)
            assert image is not None and image.task_id == str(asset.task_id), (
                f"asset {asset.pk} names image {asset.ember_image_id}, not one of its task's"
            )
            if asset.ember_history_id:
                owner = self.ember.history_owner.get(asset.ember_history_id)
                assert owner == asset.ember_image_id, (
                    f"asset {asset.pk} of image {asset.ember_image_id} carries history "
                    f"{asset.ember_history_id}, which belongs to {owner}"
                )
        for task in Task.objects.filter(pk__in=self.tasks, state=TaskState.DONE):
            assert task.asset is not None and task.asset.ember_history_id, (
                f"task {task.pk} is done without a history id on its asset"
            )
        for task in Task.objects.filter(pk__in=self.tasks, state=TaskState.HISTORY_MISSING):
            assert task.asset is not None and not task.asset.ember_history_id, (
                f"task {task.pk} is history_missing but its asset has a history id"
            )

    @invariant()
    def cancelled_tasks(self) -> None:
        for task_id in self.cancelled:
            task = self.task(task_id)
            assert task.state == TaskState.CANCELLED, (
                f"task {task_id} was cancelled, then became {task.state!r} ({task.error})"
            )
            # Even after a person's confirmed resubmit: an earlier send may be a paid
            # original in Ember, and a cancelled task is never reconciled to collect it.
            paid = self.ember.paid_jobs(task_id)
            assert not paid, (
                f"task {task_id} was cancelled although Ember has its paid job(s) "
                f"{[j.id for j in paid]}"
            )

    @invariant()
    def published_sets(self) -> None:
        for avatar_set in AvatarSet.objects.filter(published_at__isnull=False):
            bare = avatar_set.assets.filter(origin=Origin.GENERATED, ember_history_id="")
            assert not bare.exists(), (
                f"published set {avatar_set.pk} holds generated assets without history: "
                f"{list(bare.values_list('pk', flat=True))}"
            )
            held = list(avatar_set.items.values_list("asset_id", flat=True))
            assert held == self.published.get(avatar_set.pk, held), (
                f"published set {avatar_set.pk} changed from {self.published[avatar_set.pk]} "
                f"to {held}"
            )
