"""Ember answers that make no sense: each lands the task where docs/ember.md implies.

The worker must keep running, and the task must say what was wrong in words.
"""

import hashlib
import json
from datetime import timedelta

import httpx
import pytest
from asgiref.sync import async_to_sync
from django.utils import timezone

from studio import engine
from studio.ember.client import EmberClient
from studio.models import Asset, Attempt, TaskState
from studio.store import move, update
from studio.worker import MAY_HAVE_REACHED, Worker
from tests.factories import a_task, drain, history_route, history_row, plan, png_bytes, uncertain
from tests.fake_ember import JOBS, FakeEmber, catch_strays, seen
from tests.task_rows import row_of

pytestmark = pytest.mark.django_db

HTML_PAGE = httpx.Response(
    200, text="<html><body>Gateway error</body></html>", headers={"Content-Type": "text/html"}
)


def impatient(worker: Worker) -> Worker:
    """The same worker with a poll bound short enough to reach in a test."""
    return Worker(client=worker.client, poll_interval=0.01, poll_bound=0.3, tick=0)


SUBMIT_NONSENSE = {
    "202 with malformed JSON": httpx.Response(202, text="{not json"),
    "202 without a job id": httpx.Response(202, json={"status": "queued"}),
    "202 with a job id that is not a string": httpx.Response(202, json={"id": 1234}),
    "202 with a JSON list": httpx.Response(202, json=["job_1"]),
    "200 with an HTML error page": HTML_PAGE,
}


@pytest.mark.parametrize("answer", SUBMIT_NONSENSE.values(), ids=SUBMIT_NONSENSE.keys())
def test_a_nonsense_answer_to_an_image_submit_means_it_may_have_arrived(
    subject, ember, worker, answer
):
    fake = FakeEmber(ember)
    [odd, fine] = plan(subject, candidates=2)
    answers = iter([answer])
    fake.submit_route.mock(side_effect=lambda request: next(answers, None) or fake._submit(request))

    drain(Worker(client=worker.client, workers=1, poll_interval=0, tick=0))

    odd.refresh_from_db()
    fine.refresh_from_db()
    assert odd.state == TaskState.UNCERTAIN
    assert odd.error.startswith(MAY_HAVE_REACHED)
    assert "Ember" in odd.error.removeprefix(MAY_HAVE_REACHED)  # says what was wrong
    assert fine.state == TaskState.DONE  # the worker kept going


@pytest.mark.parametrize("answer", SUBMIT_NONSENSE.values(), ids=SUBMIT_NONSENSE.keys())
def test_a_nonsense_answer_to_a_clip_submit_is_resent_under_the_same_key(
    subject, ember, worker, answer
):
    fake = FakeEmber(ember)
    [clip] = plan(subject, frames=("clip",))
    answers = iter([answer])
    fake.submit_route.mock(side_effect=lambda request: next(answers, None) or fake._submit(request))

    drain(worker)
    clip.refresh_from_db()
    assert clip.state == TaskState.QUEUED
    move(clip, TaskState.QUEUED)  # due now rather than after the short back-off
    drain(worker)

    clip.refresh_from_db()
    assert clip.state == TaskState.DONE
    assert {h["Idempotency-Key"] for h in fake.submit_headers} == {clip.idempotency_key}


POLL_NONSENSE = {
    "malformed JSON": httpx.Response(200, text="{oops"),
    "unknown status": httpx.Response(200, json={"id": "job_1", "status": "exploded"}),
    "succeeded without a result": httpx.Response(200, json={"id": "job_1", "status": "succeeded"}),
    "succeeded without an image id": httpx.Response(
        200, json={"id": "job_1", "status": "succeeded", "result": {"image": {}}}
    ),
    "an HTML error page": HTML_PAGE,
}


@pytest.mark.parametrize("answer", POLL_NONSENSE.values(), ids=POLL_NONSENSE.keys())
def test_nonsense_while_polling_keeps_polling_then_rests_uncertain_saying_why(
    subject, ember, worker, answer
):
    fake = FakeEmber(ember)
    [task] = plan(subject, candidates=1)
    fake.poll_route.mock(return_value=answer)

    drain(impatient(worker))

    task.refresh_from_db()
    assert task.state == TaskState.UNCERTAIN
    assert "did not finish" in task.error
    assert "Ember's last answer:" in task.error
    assert fake.poll_route.call_count > 1  # polling went on; one odd answer is no verdict
    assert len(fake.submits) == 1  # and nothing was sent again


def test_nonsense_while_polling_is_forgotten_once_ember_answers_properly(subject, ember, worker):
    fake = FakeEmber(ember)
    [task] = plan(subject, candidates=1)
    answers = iter([HTML_PAGE, POLL_NONSENSE["unknown status"]])
    fake.poll_route.mock(
        side_effect=lambda request, job_id: next(answers, None) or fake._poll(request, job_id)
    )

    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.DONE
    assert task.error == ""


def test_only_the_fields_the_contract_names_are_kept_of_a_padded_answer(subject, ember, worker):
    """Found by a review: Ember's answer (up to 1 MiB) was saved whole on its task and asset,
    and a batch of 72 answers padded with empty lists took 13 s of CPU and 2.5 GB to draw."""
    fake = FakeEmber(ember)
    [task] = plan(subject, candidates=1)
    padding = [[] for _ in range(50_000)]

    def poll(request, job_id):
        result = fake.jobs[job_id]["result"]
        result["junk"] = padding
        result["image"]["junk"] = padding
        result["image"]["metadata"]["junk"] = padding
        result["image"]["metadata"]["model"] = "m" * 100_000
        result["history_error"] = {"padding": padding}
        return fake._poll(request, job_id)

    fake.poll_route.mock(side_effect=poll)

    drain(worker)

    task.refresh_from_db()
    asset = Asset.objects.get(task=task)
    assert task.state == TaskState.DONE
    assert set(task.result) == {"image", "history", "history_error"}
    assert set(task.result["image"]) == {"id", "mime", "sha256", "bytes", "metadata"}
    assert set(task.result["image"]["metadata"]) == {"provider", "model"}  # all it was sent
    assert task.result["image"]["metadata"]["model"] == "m" * 1000
    assert asset.upstream == task.result
    kept = len(json.dumps(task.result))
    assert kept <= 4_000, f"{kept} characters kept of a padded answer (bound: 4,000)"


def test_only_the_fields_the_contract_names_are_kept_of_a_padded_history_row(subject, ember):
    """As above, for an answer reconcile reads from Ember's history."""
    task = uncertain(a_task(subject))
    row = history_row(task, job_id="job_7")
    padded = {**row["result"], "junk": [[] for _ in range(50_000)]}
    history_route(ember, task, [{**row, "result": padded}])

    engine.reconcile(task=task)

    saved = row_of(task)
    assert saved.state == TaskState.COPYING
    assert saved.result == row["result"]


def answering(ember, claims: dict, content: bytes) -> FakeEmber:
    """An Ember whose results say `claims` of their image (None: left out) and whose file
    answers are `content`."""
    fake = FakeEmber(ember)

    def poll(request, job_id):
        image = fake.jobs[job_id]["result"]["image"]
        image.update({key: value for key, value in claims.items() if value is not None})
        for key in (key for key, value in claims.items() if value is None):
            image.pop(key, None)
        return fake._poll(request, job_id)

    fake.poll_route.mock(side_effect=poll)
    fake.file_route.mock(
        return_value=httpx.Response(200, content=content, headers={"Content-Type": "image/png"})
    )
    return fake


def test_an_empty_sha256_claim_with_other_bytes_is_a_failed_copy_and_nothing_is_released(
    subject, ember, worker
):
    """Found by a review with its own Ember: `"sha256": ""` switched the check off."""
    [task] = plan(subject, candidates=1)
    other = png_bytes(seed=41)  # an image that decodes, but not the one Ember made
    fake = answering(ember, {"sha256": ""}, other)  # present, and names nothing

    drain(worker)

    task.refresh_from_db()
    assert (task.state, task.error) == (
        TaskState.COPY_FAILED,
        "The image Ember sent does not match its sha256.",
    )
    assert not Asset.objects.filter(sha256=hashlib.sha256(other).hexdigest()).exists()
    assert not fake.release_route.called


@pytest.mark.parametrize("kind", ["non-image bytes", "truncated image", "wrong sha256"])
def test_bad_bytes_from_ember_end_copy_failed_with_a_readable_error(subject, ember, worker, kind):
    fake = FakeEmber(ember)
    [task] = plan(subject, candidates=1)
    sent: dict[str, bytes] = {}

    def bad(data: bytes) -> bytes:
        if kind == "non-image bytes":
            return b"<html>not an image</html>"
        if kind == "truncated image":
            return data[: len(data) // 2]
        return data + b"tampered"

    def poll(request, job_id):
        image = fake.jobs[job_id]["result"]["image"]
        sent[image["id"]] = bad(fake.images[image["id"]])
        if kind != "wrong sha256":
            # Ember vouches for these bytes: only the image check can catch them.
            image["sha256"] = hashlib.sha256(sent[image["id"]]).hexdigest()
        return fake._poll(request, job_id)

    fake.poll_route.mock(side_effect=poll)
    fake.file_route.mock(
        side_effect=lambda request, image_id: httpx.Response(
            200, content=sent[image_id], headers={"Content-Type": "image/png"}
        )
    )

    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.COPY_FAILED
    if kind == "wrong sha256":
        assert task.error == "The image Ember sent does not match its sha256."
    elif kind == "non-image bytes":
        assert task.error == "The file is not a PNG, JPEG, WebP or GIF image."
    else:
        assert task.error.startswith("The image could not be decoded"), task.error
    assert not Asset.objects.filter(task=task).exists()
    assert not fake.release_route.called
    # Bytes damaged on the way may come whole next time; bytes Ember vouches for come back
    # the same, and are not fetched and decoded again (a review's GIF cost 1 GB each time).
    assert fake.file_route.call_count == (3 if kind == "wrong sha256" else 1)


def test_a_submit_refused_with_an_html_4xx_fails_with_a_readable_error(subject, ember, worker):
    ember.post(JOBS).mock(return_value=httpx.Response(418, text="<html>teapot</html>"))
    [task] = plan(subject, candidates=1)

    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.FAILED
    assert task.error == "Ember answered HTTP 418."


REFUSALS = [409, 400, 404, 422]


@pytest.mark.parametrize("status", REFUSALS)
def test_a_clip_refused_when_re_sent_under_its_key_rests_uncertain_not_failed(
    subject, ember, worker, status
):
    """Found by a review: the first send (a 500) may have made a paid job under the key;
    a refusal of the re-send proves nothing about it, so the clip must stay findable."""
    fake = FakeEmber(ember)
    [clip] = plan(subject, frames=("clip",))
    answers = iter(
        [httpx.Response(500, json={}), httpx.Response(status, json={"error": {"message": "No."}})]
    )
    fake.submit_route.mock(side_effect=lambda request: next(answers))

    drain(worker)
    move(clip, TaskState.QUEUED)  # due now rather than after the short back-off
    drain(worker)

    clip.refresh_from_db()
    assert clip.state == TaskState.UNCERTAIN
    assert clip.phase == "Reconcile before retry"
    assert clip.error == (
        "Ember refused this send (No.), but an earlier send may have reached Ember. "
        "Check history before submitting again."
    )
    sent = [call.request.headers["Idempotency-Key"] for call in fake.submit_route.calls]
    assert sent == [clip.idempotency_key] * 2
    assert list(clip.attempts.values_list("outcome", flat=True)) == ["unknown"]


def test_an_image_resubmit_refused_rests_uncertain_since_the_first_may_be_paid(
    subject, ember, worker
):
    fake = FakeEmber(ember)
    [task] = plan(subject, candidates=1)
    answers = iter([httpx.Response(502, json={}), httpx.Response(422, json={})])
    fake.submit_route.mock(side_effect=lambda request: next(answers))
    drain(worker)
    task.refresh_from_db()
    assert task.state == TaskState.UNCERTAIN

    engine.resubmit(task=task, seen_version=task.version, confirmed_not_received=True)
    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.UNCERTAIN  # reconcile can still find attempt 1's image
    assert task.error.startswith("Ember refused this send (Ember answered HTTP 422.)")
    assert fake.submit_route.call_count == 2


def collect_by_reconcile(task):
    engine.reconcile(task=task)


def collect_by_history_search(task):
    later = timezone.now() + timedelta(hours=1)  # past AVATARS_ADOPT_EVERY
    async_to_sync(engine.adopt_due)(client=EmberClient(), now=later)


@pytest.mark.parametrize("collect", [collect_by_reconcile, collect_by_history_search])
def test_a_resubmitted_job_that_fails_rests_uncertain_since_the_first_may_be_paid(
    subject, ember, worker, collect
):
    fake = FakeEmber(ember)
    fake.lose_answers = 1  # the first job is made and paid; its answer is lost
    [task] = plan(subject, candidates=1)
    drain(worker)
    task.refresh_from_db()
    assert task.state == TaskState.UNCERTAIN

    engine.resubmit(task=task, seen_version=task.version, confirmed_not_received=True)
    failed = {"status": "failed", "error": {"message": "The provider refused this prompt."}}
    fake.poll_route.mock(side_effect=lambda request, job_id: httpx.Response(200, json=failed))
    drain(worker)

    task.refresh_from_db()
    assert fake.charged[str(task.pk)] == 2
    assert task.state == TaskState.UNCERTAIN
    assert task.error == (
        "Ember's job job_2 failed (The provider refused this prompt.), but an "
        "earlier send may have reached Ember. Check history before submitting again."
    )
    # Reconcile collects the first send's original (found by a re-review: it looked only
    # for the failed job's row, and a resubmit would have paid a third time).
    fake.poll_route.mock(side_effect=fake._poll)
    del fake.history_rows["job_2"]  # as Ember: a failed job saved no image, so no history row
    collect(task)
    drain(worker)
    task.refresh_from_db()
    assert task.state == TaskState.DONE
    assert task.ember_job_id == "job_1"
    assert fake.charged[str(task.pk)] == 2


UNSAFE_ROWS = {
    "an unsafe job id": {"job_id": "../x"},
    "an unsafe image id": {"image_id": "img_1/../../history", "image": "img_1/../../history"},
    "an unsafe image id in its result only": {"image_id": None, "image": "../../history"},
}


@pytest.mark.parametrize("odd", UNSAFE_ROWS.values(), ids=UNSAFE_ROWS.keys())
def test_reconcile_adopts_no_history_row_naming_an_unsafe_id_and_sends_nothing_more(
    subject, ember, worker, odd
):
    fake = FakeEmber(ember)
    fake.lose_answers = 1  # Ember took the submit; its answer never arrived
    [task] = plan(subject, candidates=1)
    drain(worker)
    task.refresh_from_db()
    assert task.state == TaskState.UNCERTAIN

    def history_with_odd_ids(request: httpx.Request) -> httpx.Response:
        items = fake._history(request).json()["items"]
        for row in items:
            row.update({k: v for k, v in odd.items() if k != "image"})
            if "image" in odd:
                row["result"]["image"]["id"] = odd["image"]
        return httpx.Response(200, json={"items": items})

    fake.history_route.mock(side_effect=history_with_odd_ids)
    catch_strays(ember)
    engine.reconcile(task=task, client=worker.client)
    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.UNCERTAIN
    refused = next(v for k, v in odd.items() if v and k != "image_id")
    assert ascii(refused) in task.error  # says which row it would not take, and why
    assert seen(ember) == [f"POST {JOBS}", "GET /api/v1/history"]


def test_an_image_shorter_than_its_answer_said_is_a_failed_copy_and_nothing_is_released(
    subject, ember, worker
):
    """Found by a review with its own Ember: with no sha256 in the answer, a PNG cut short
    before its end (which decodes) was archived and Ember's whole copy released."""
    [task] = plan(subject, candidates=1)
    whole = png_bytes(seed=42)
    cut = whole[:-12]  # without its IEND: Pillow decodes it all the same
    fake = answering(ember, {"sha256": None, "bytes": len(whole)}, cut)

    drain(worker)

    task.refresh_from_db()
    assert (task.state, task.error) == (
        TaskState.COPY_FAILED,
        f"The image Ember sent is {len(cut):,} bytes; its answer said {len(whole):,}.",
    )
    assert not Asset.objects.filter(sha256=hashlib.sha256(cut).hexdigest()).exists()
    assert not fake.release_route.called


def test_a_job_ember_names_for_a_second_send_is_not_followed_for_it(subject, ember, worker):
    """Ember answering two image submits with one job: the second task would have filed the
    first's image as its own, shown done, while the job it may have paid for went unseen."""
    fake = FakeEmber(ember)
    [first, second] = plan(subject, candidates=2)
    answers: list[str] = []

    def same_job(request: httpx.Request) -> httpx.Response:
        answer = fake._submit(request)  # Ember makes (and charges) a job for each
        answers.append(answer.json()["id"])
        return httpx.Response(202, json={"id": answers[0], "status": "queued"})

    fake.submit_route.mock(side_effect=same_job)

    drain(Worker(client=worker.client, workers=1, poll_interval=0, tick=0))

    first.refresh_from_db()
    second.refresh_from_db()
    assert first.state == TaskState.DONE and first.ember_job_id == answers[0]
    assert second.state == TaskState.UNCERTAIN, second.error
    assert second.ember_job_id == "" and second.asset_id is None
    assert second.error.startswith(f"Ember answered this send with job {answers[0]}, which task")
    assert str(first.pk) in second.error and "Nothing more was sent" in second.error
    [attempt] = second.attempts.all()
    assert attempt.outcome == "unknown" and attempt.ember_job_id == ""
    assert Asset.objects.filter(task__isnull=False).count() == 1  # the first's image, once
    assert len(fake.submits) == 2, "nothing more was sent"
    image = fake.jobs[answers[0]]["result"]["image"]["id"]
    assert seen(ember).count(f"PATCH /api/v1/explorations/{image}/protection") == 1


def test_a_job_ember_names_again_for_a_persons_resubmit_is_not_followed(subject, ember, worker):
    """A failed job resubmitted by a person: Ember answering with the failed job's id again."""
    fake = FakeEmber(ember)
    task = a_task(subject)
    sent = timezone.now() - timedelta(minutes=5)
    Attempt.objects.create(
        task=task, number=1, ember_job_id="job_77", submitted_at=sent, outcome="failed"
    )
    update(task, submitted_at=sent)  # as the first send left it

    def old_answer(request: httpx.Request) -> httpx.Response:
        fake._submit(request)
        return httpx.Response(202, json={"id": "job_77", "status": "queued"})

    fake.submit_route.mock(side_effect=old_answer)
    drain(Worker(client=worker.client, workers=1, poll_interval=0, tick=0))

    task.refresh_from_db()
    assert task.state == TaskState.UNCERTAIN
    assert "job job_77, which attempt 1 of this task already has" in task.error
    assert [a.outcome for a in task.attempts.order_by("number")] == ["failed", "unknown"]
    assert not any(path.startswith("GET /api/v1/api-generators/jobs/") for path in seen(ember))


def test_the_same_trouble_polling_is_logged_once_not_at_every_poll(subject, ember, worker, caplog):
    """Left from a review: a job whose every poll was answered with an HTML page logged a
    WARNING at each poll (hundreds in an hour); its phase was already written once."""
    fake = FakeEmber(ember)
    plan(subject, candidates=1)
    fake.poll_route.mock(return_value=HTML_PAGE)

    with caplog.at_level("DEBUG", logger="studio.worker"):
        drain(impatient(worker))

    troubles = [r for r in caplog.records if "poll failed" in r.getMessage()]
    assert fake.poll_route.call_count > 2, fake.poll_route.call_count
    assert len(troubles) == fake.poll_route.call_count  # each poll is still on record
    warned = [r for r in troubles if r.levelname == "WARNING"]
    assert len(warned) == 1, f"{len(warned)} warnings for {len(troubles)} failed polls"
