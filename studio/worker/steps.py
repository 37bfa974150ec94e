"""The steps of one task (docs/design.md §6.5-§6.7): submit, follow, finish, copy.

`Steps` is mixed into `Worker` (loop.py): the steps use the worker's Ember client,
its settings and its stop flag; the loop starts one `drive` coroutine per due task.
Each step commits the state naming it before acting on it, so a process killed at
any line leaves a row that says how far it got. What each step writes is in
transitions.py, run on the database thread through `db`.
"""

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from logging import DEBUG, WARNING
from typing import Any

from django.utils import timezone

from studio import dbfaults, originals
from studio.ember.client import (
    EmberAuthError,
    EmberClient,
    EmberError,
    EmberNotFound,
    EmberTooLarge,
    EmberUnsafeId,
    Submitted,
    encode_payload,
)
from studio.models import ACTIVE, Asset, Attempt, Task, TaskState
from studio.phrases import COPYING_PHASE, GENERATING_PHASE, GONE_PHASE, QUEUED_PHASE
from studio.store import Conflict, move, update
from studio.worker import archive, credentials, room, troubles, turns
from studio.worker.pacing import Pacing
from studio.worker.transitions import (
    COPY_FAILED_PHASE,
    RECONCILE_PHASE,
    Answer,
    _attempt_number,
    _postpone,
    _read_references,
    _record_accepted,
    _record_ended,
    _record_refusal,
    _reference_changed,
    _rest,
    _rest_unknown,
    _rest_unsafe,
    _settle_unrecorded,
    build_payload,
    db,
    record_asset,
)

log = logging.getLogger("studio.worker")

FETCH_TRIES = 3
# While Ember is away (unreachable, busy, answering 5xx) a copy waits longer, as a poll
# does: a review's Ember restarted for six seconds, and nine copies in flight rested
# copy_failed for a person to reconcile. About 90 s of waiting in all.
FETCH_TRIES_EMBER_AWAY = 8
FETCH_RETRY_DELAY = 1.0  # seconds, doubled after each failed try
FETCH_RETRY_MOST = 30.0  # seconds: the longest wait between two tries


class Steps:
    """Advance one task through submit, follow and finish; mixed into `Worker`."""

    # Set by `Worker.__init__` (loop.py).
    client: EmberClient
    stopping: bool
    poll_bound: float
    poll_interval: float
    pacing: Pacing
    room: room.Room
    fetch_retry_delay: float
    unrecorded: dict[str, Answer]
    interrupted: dict[str, float]
    tick: float
    _handoff: deque[turns.Turn]
    _sleep: Callable[[float], Awaitable[None]]  # the loop's: wakes early when a stop is asked

    async def drive(
        self, task_id: str, *, row: Task | None = None, turn: turns.Turn | None = None
    ) -> None:
        """Advance one task through its states until it rests, waits or the worker stops.

        `row` is the task as the pump just read it, which spares reading it again: every
        step's first write to it is versioned or records what Ember said. `turn` orders its
        database calls among the others' (turns.py); a job seen ended starts a new one."""
        turns.TURN.set(turn or turns.new_turn())
        self.interrupted.pop(task_id, None)  # taken up (its row is read afresh: below)
        sent = None  # when the submit went out, if this coroutine sent one Ember accepted
        try:
            task = row if row is not None else await db(Task.objects.get)(pk=task_id)
            while not self.stopping and task.state in ACTIVE:
                if task.state == TaskState.QUEUED:
                    if (sent := await self.submit(task)) is None:
                        return
                elif task.state == TaskState.RUNNING:
                    if not await self.follow(task, sent):
                        return
                else:
                    await self.finish(task)
                    if task.state == TaskState.COPYING:
                        return  # it waits: Ember refused our token (credentials.py)
        except Conflict:
            log.info("task=%s moved under us; leaving it to the other writer", task_id)
        except Exception as exc:
            if dbfaults.unusable(exc):
                # Nothing can be written: it goes on first once the database is back (_resumed).
                log.warning("task=%s stopped mid-step: %s", task_id, dbfaults.said(exc))
                self.interrupted[task_id] = time.monotonic() + self.tick
                return
            # One task's surprise never stops the pump; it waits before being tried again.
            log.exception("task=%s step failed", task_id)
            await db(_postpone)(task_id, f"The worker hit an error: {exc}")
        finally:
            self._handoff.append(turns.TURN.get() or turns.new_turn())

    async def submit(self, task: Task) -> datetime | None:
        """Take a queued task through `preparing` and `submitting` to the POST (§6.5).

        The answer leaves the task on the row docs/ember.md's table names. Return
        when Ember's acceptance arrived if the task went on to `running`, else None.
        """
        full = await self.room.refuses()  # nothing is paid for that could not be kept
        if full:  # before `preparing`: nothing is read or written again each 30 s but this
            phase, due = room.held(full)
            await db(move)(task, TaskState.QUEUED, expected=task.version, phase=phase, due=due)
            return None
        number = await db(self._prepare)(task)
        if number is None:
            return None
        references = await self.load_references(task)
        if references is None:
            # Versioned: a cancel that won while the references were read stands.
            await db(_reference_changed)(task)
            return None
        if self.stopping:
            # Nothing has been sent: a stopping worker does not start a paid request.
            await db(move)(task, TaskState.QUEUED, expected=task.version, phase=QUEUED_PHASE)
            return None
        body = encode_payload(build_payload(task, references, attempt=number))
        # The photos' base64 is in the body now: let it go before the (long) send.
        del references
        await db(move)(
            task,
            TaskState.SUBMITTING,
            expected=task.version,
            submitted_at=timezone.now(),
            phase="Sending to Ember",
        )
        return await self._send(task, body, number)

    def _prepare(self, task: Task) -> int | None:
        """Write `preparing` (versioned); return the number the send will be, None if it rests.

        What runs back to back before the references are read takes one trip to the
        database thread: whether a clip must stop being re-sent, the write, the number.
        """
        sent = task.attempt_under_key()
        if self._stop_resending(task, sent):
            return None
        move(task, TaskState.PREPARING, expected=task.version, phase="Checking reference photos")
        return _attempt_number(task, sent)

    def _stop_resending(self, task: Task, sent: Attempt | None) -> bool:
        """Rest a clip `uncertain` once its key was first sent longer than the poll bound ago.

        Re-sending under the key is free, but one whose answers keep getting lost
        would otherwise be sent every few seconds for ever. `sent` is the attempt its
        key stands for, if any. Return True when it rests.
        """
        if sent is None:
            return False
        if (timezone.now() - sent.submitted_at).total_seconds() <= self.poll_bound:
            return False
        since = sent.submitted_at.astimezone(UTC)
        move(
            task,
            TaskState.UNCERTAIN,
            expected=task.version,
            phase=RECONCILE_PHASE,
            error=f"Ember's answer to this clip never arrived: it was re-sent under key "
            f"{task.idempotency_key} since {since:%Y-%m-%d %H:%M:%S} UTC; nothing more was sent.",
        )
        return True

    async def _send(self, task: Task, body: bytes, number: int) -> datetime | None:
        """POST the job and record what the answer proves; if accepted, return when it went out.

        Nothing that goes wrong here leaves the task `submitting`, where nothing would
        move it while this worker lives: an answer that cannot be read, or one whose
        recording fails, puts the task where the wake-up table would, at once.
        """
        task_id = str(task.pk)
        answer: Answer = None
        sent = timezone.now()
        try:
            submitted = await self.client.submit(
                body, idempotency_key=task.idempotency_key, provider=task.provider
            )
        except EmberError as exc:
            answer, detail = exc, exc.message
        except Exception as exc:
            log.exception("task=%s Ember's answer to a submit could not be read", task_id)
            detail = f"Ember's answer could not be read ({type(exc).__name__})."
        else:
            answer = submitted
            detail = f"Ember accepted job {submitted.job_id}, but recording it failed."
        answered = timezone.now()
        try:
            # Shielded: Ember's answer is recorded even if we are being cancelled.
            if isinstance(answer, Submitted):
                await asyncio.shield(db(_record_accepted)(task, answer, number, answered))
                return sent
            if isinstance(answer, EmberError):
                await asyncio.shield(db(_record_refusal)(task, answer, number))
                return None
        except Exception:
            if isinstance(answer, Submitted):
                # A person may need this job id to find the paid job: say it loudly.
                log.error(
                    "task=%s Ember accepted job %s, but recording it failed",
                    task_id,
                    answer.job_id,
                    exc_info=True,
                )
            else:
                log.exception("task=%s recording Ember's answer failed", task_id)
        # If this write fails too, the pump's sweep settles the task from `unrecorded`.
        self.unrecorded[task_id] = answer
        await asyncio.shield(db(_settle_unrecorded)(task_id, answer, detail))
        del self.unrecorded[task_id]
        return None

    async def load_references(self, task: Task) -> list[dict[str, Any]] | None:
        """Read and re-hash each frozen reference; None when one is missing or changed."""
        return await asyncio.to_thread(_read_references, task.references)

    async def follow(self, task: Task, sent: datetime | None = None) -> bool:
        """Poll a running job until it ends (§6.6); return True when it went on to `copying`.

        `sent`: when the submit of a job this coroutine sent (and Ember accepted) went
        out; only those teach the pacing. Poll errors are transient (docs/ember.md) and
        shown on the task. The bound applies only after an answer that does not end the
        job: a worker back from a long outage asks Ember first (it may well have finished).
        """
        assert task.submitted_at is not None
        start = sent or task.submitted_at
        deadline = task.submitted_at + timedelta(seconds=self.poll_bound)
        kind = (task.provider, task.kind)
        plan = self.pacing.plan(kind)
        planned = plan.polls()
        last_running = None  # seconds after `start` a poll last saw the job running
        while not self.stopping:
            if planned:
                # No request while the job cannot be done yet (a resumed one's is due at once).
                await self._sleep_until(min(start + timedelta(seconds=planned.pop(0)), deadline))
            asked = (timezone.now() - start).total_seconds()
            try:
                job = await self.client.poll(task.ember_job_id)
            except EmberUnsafeId as exc:
                # The job id, or the image its result names, cannot go into a URL.
                await db(_rest_unsafe)(task, exc)
                return False
            except EmberNotFound:
                await db(_rest_unknown)(task)
                return False
            except EmberAuthError as exc:
                await db(credentials.wait)(task, exc)  # the token's fault: no bound counted
                return False
            except EmberError as exc:
                task = await self._poll_failed(task, exc)
            else:
                if job.status in ("succeeded", "failed"):
                    turns.TURN.set(turns.new_turn())  # what the end needs goes in its order
                    # A failure may come at any time; a job resumed was not watched.
                    if job.status == "succeeded" and sent is not None:
                        self.pacing.learn(kind, plan, last_running, asked)
                    return await db(_record_ended)(task, job)
                last_running = asked
                if task.error:  # answered again after a trouble the row still shows
                    task = await db(update)(task, phase=GENERATING_PHASE, error="")
            if timezone.now() > deadline:
                await db(self._give_up)(task)
                return False
            if not planned:
                await self._sleep(self.poll_interval)
        return False

    async def _poll_failed(self, task: Task, exc: EmberError) -> Task:
        """Show on the task why a poll taught nothing: one warning and write a new problem."""
        new = task.error != exc.message
        log.log(WARNING if new else DEBUG, "task=%s poll failed: %s", task.pk, exc.message)
        if not new:
            return task
        return await db(update)(task, phase=troubles.poll_trouble(exc), error=exc.message)

    async def _sleep_until(self, when: datetime) -> None:
        """Sleep until `when` (return at once if it has passed)."""
        await self._sleep(max(0.0, (when - timezone.now()).total_seconds()))

    def _give_up(self, task: Task) -> None:
        """Rest a job unfinished past the bound `uncertain`, resubmitting nothing (§6.6)."""
        last = f" Ember's last answer: {task.error}" if task.error else ""
        move(
            task,
            TaskState.UNCERTAIN,
            phase="Ember did not finish in time; reconcile before retry",
            error=f"Ember's job {task.ember_job_id} did not finish within "
            f"{self.poll_bound:.0f} seconds. Nothing was resubmitted.{last}",
        )

    async def finish(self, task: Task) -> None:
        """Copy first, release last (§6.7): the original, its row, then the PATCH."""
        # An answer saved without an image (an old row, an edit) rests the task as an
        # unsafe image id does (`_copy`): nothing can be fetched, asking again won't help.
        image, history = task.saved("image"), task.saved("history")
        # The asset row and `task.asset` are written in one transaction (record_asset),
        # so the task, read as this coroutine started, says whether the bytes are safe.
        asset = None if task.asset_id is None else await db(Asset.objects.get)(pk=task.asset_id)
        copied = asset is None  # by this call: its bytes were hashed as they were written
        if asset is None:
            original = await self._copy_or_rest(task, image)
            if original is None:
                return
            asset = await db(record_asset)(task, original)
            if asset is None:  # another task's original is that image: nothing to release
                return
        elif (
            history.get("id")
            and not asset.ember_history_id
            and image.get("id") == asset.ember_image_id
        ):
            # The bytes are already safe: only the history id is new. An answer about
            # another image (another attempt's) never lends this one its history.
            await db(update)(asset, ember_history_id=history["id"])
        # Bytes the archive held for an image Ember answered 404 for are released too: a
        # 404 then is confirmed by the file route's (`let_go`), and one 404 alone had been
        # taken for "released" (a review's Ember still held the image).
        rest, released = await self._let_go(task, asset, copied=copied)
        if not rest:
            return
        await db(_rest)(task, asset, released)

    async def _let_go(self, task: Task, asset: Asset, *, copied: bool) -> tuple[bool, bool | None]:
        """Ask Ember to let go of its copy unless it confirmed already; return whether the
        task may rest, and what its `protection_released` is then.

        Always the image whose bytes Avatars holds, never one it did not copy, and only
        while it holds them whole: they may have gone since their row was written (a file
        removed by hand, an upload's removal racing this copy), or been damaged in place
        before a later finish (a restart, a reconcile).
        """
        released = task.protection_released
        if released is True or not asset.ember_image_id:
            return True, released
        held = await archive.held(asset)
        if held and not copied:
            held = await asyncio.to_thread(archive.whole, asset)
        if not held and not await self._copy_again(task, asset):
            return False, released
        released = await self.client.let_go(asset.ember_image_id)
        if not released:  # shown on the task (protection_released); said in the log too
            log.warning(
                "task=%s Ember did not confirm the release of image %s: it may still be "
                "protected there; the admin's task action 'Ask Ember again to let go of "
                "its copy' asks again",
                task.pk,
                asset.ember_image_id,
            )
        return True, released

    async def _copy_again(self, task: Task, asset: Asset) -> bool:
        """Copy an asset's original whose file went missing or was damaged again; True once
        it is back, whole.

        The asset's own image, checked against the asset's own hash (never the image a
        saved answer names, which may be another attempt's), written over what is there.
        Nothing is released until then: the task rests `copy_failed` (or where the failure
        says), the damaged file is left for a person, and a reconcile later copies it
        again the same way.
        """
        log.warning(
            "task=%s original %s is missing or damaged; copying it again", task.pk, asset.sha256
        )
        own = {"id": asset.ember_image_id, "sha256": asset.sha256}
        return await self._copy_or_rest(task, own, over=asset) is not None

    async def _copy_or_rest(
        self, task: Task, image: dict[str, Any], *, over: Asset | None = None
    ) -> originals.Original | None:
        """Copy the image (over `over`'s file), or rest the task where the failure says and
        return None."""
        try:
            return await self._copy(task, image, over=over)
        except _CopyPaused:
            return None  # left `copying`: the next start copies it
        except EmberUnsafeId as exc:
            # Nothing was fetched; an original nobody can name safely is not "failed".
            await db(_rest_unsafe)(task, exc)
        except EmberAuthError as exc:
            await db(credentials.wait)(task, exc)  # the token's fault, not the image's
        except (EmberError, originals.NotAnImage, originals.ChecksumFailed, OSError) as exc:
            await db(move)(
                task,
                TaskState.COPY_FAILED,
                phase=GONE_PHASE if isinstance(exc, EmberNotFound) else COPY_FAILED_PHASE,
                error=getattr(exc, "message", None) or str(exc),
            )
        return None

    async def _copy(
        self, task: Task, image: dict[str, Any], *, over: Asset | None = None
    ) -> originals.Original:
        """Fetch the image and save it as an original, retrying a few times (the task says
        which try failed and why); over `over`'s file (missing or damaged), the bytes must
        be its own and replace what is there."""
        if "id" not in image:
            raise EmberUnsafeId("Ember's saved answer names no image to copy.")
        delay, attempt = self.fetch_retry_delay, 0
        while True:
            attempt += 1
            tries = FETCH_TRIES
            try:
                data, _content_type = await self.client.fetch(
                    image["id"], sha256=image.get("sha256"), size=image.get("bytes")
                )
                if over is not None:
                    return await asyncio.to_thread(self.room.keep, archive.put_back, data, over)
                return await asyncio.to_thread(self.room.keep, originals.save, data)
            except EmberNotFound as gone:
                if over is not None:
                    raise
                return await self._archived(task, image, gone)
            except (EmberTooLarge, EmberUnsafeId, EmberAuthError, originals.NotDurable):
                # The image is gone, too large, or cannot be named safely, or the disk
                # did not confirm the write: asking again gets the same answer, and a
                # second fsync proves nothing (the kernel may have dropped the pages it
                # failed to write).
                raise
            except originals.NotAnImage as exc:
                # Bytes that hash to Ember's own claim are what Ember holds: asked again,
                # it sends them again, and each try decodes them again (a review's GIF).
                if attempt == FETCH_TRIES or image.get("sha256") is not None:
                    raise
                trouble: Exception = exc
            except (EmberError, originals.ChecksumFailed, OSError) as exc:
                tries = FETCH_TRIES_EMBER_AWAY if troubles.ember_away(exc) else FETCH_TRIES
                if attempt >= tries:
                    raise
                trouble = exc
            phase = f"{COPYING_PHASE}. Try {attempt} of {tries} failed: {_said(trouble)}."
            await db(update)(task, phase=f"{phase} Trying again in {delay:.0f} s.")
            await self._sleep(delay)
            if self.stopping:
                raise _CopyPaused
            delay = min(delay * 2, FETCH_RETRY_MOST)

    async def _archived(
        self, task: Task, image: dict[str, Any], gone: EmberNotFound
    ) -> originals.Original:
        """Return the archive's original of an image Ember no longer has (released, then
        removed there), or raise `gone` again.

        A backup's copy put back by a person, or the lost install's file restored, is the
        same image if it hashes to Ember's own claim.
        """
        found = await asyncio.to_thread(archive.found, image)
        if found is None:
            raise gone
        log.info(
            "task=%s Ember no longer has image %s; its bytes were in the archive",
            task.pk,
            image["id"],
        )
        return found


def _said(exc: Exception) -> str:
    """Say a failed try's cause for the task's phase, without its closing full stop."""
    said = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    return said.rstrip(".")


class _CopyPaused(Exception):
    """A stop was asked while a copy waited to try again: the task stays `copying`."""
