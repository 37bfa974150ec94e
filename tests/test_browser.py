"""The studio in a real browser: Debian's chromium, the web server, the worker and the simulator.

Everything runs as it would for a person: uvicorn serves the pages, `run_worker`
drives the tasks through the Ember simulator, and Playwright clicks. Waits are
bounded; the assertions are what a person sees on the page.
"""

import io
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from PIL import Image, ImageDraw
from playwright.sync_api import Browser, Page, expect, sync_playwright

from tests import browsers
from tests.processes import Simulator, free_port, migrated_template, new_stack

pytestmark = pytest.mark.e2e

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
USERNAME, PASSWORD = "grace", "correct horse battery"
PUBLISH_REFUSED = "Ember history must be recovered before publishing generated images."
SLOW = 60_000  # milliseconds: a batch goes through the worker and the simulator
SCREENSHOT = Path("/tmp/avatars-batch.png")

SEED = f"""
from django.contrib.auth.models import User
from studio import engine
from tests.conftest import png_bytes
User.objects.create_superuser({USERNAME!r}, password={PASSWORD!r})
bo = engine.create_subject(name="Bo")
engine.add_reference(subject=bo, data=png_bytes(2, size=(160, 160)), file_name="bo.png")
result = bo.pk
"""


@dataclass
class Process:
    """A subprocess whose output is drained into memory, so a full pipe never blocks it."""

    name: str
    proc: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def wait_for(self, text: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(text in line for line in self.lines):
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        raise AssertionError(f"{self.name} never said {text!r}:\n{self.output()}")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._reader.join(timeout=5)

    def output(self) -> str:
        return "".join(self.lines[-80:])


class Studio:
    """One running install: simulator, web server and worker, with a way to stop the worker."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.sim: Simulator | None = None
        self.web: Process | None = None
        self.worker: Process | None = None

    def start(self) -> None:
        self.sim = Simulator(self.tmp, job_seconds=0.5)
        self.stack = new_stack(migrated_template(self.tmp), self.tmp / "install", self.sim)
        # Poll Ember faster than the default so a batch finishes in seconds, not tens.
        self.stack.env["AVATARS_POLL_INTERVAL"] = "0.5"
        self.stack.django(SEED)
        self.web = Process(
            "uvicorn",
            self.stack.popen(
                sys.executable,
                "-m",
                "uvicorn",
                "avatars.asgi:application",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--log-level",
                "warning",
            ),
        )
        self._wait_for_web()
        self.start_worker()

    def configure_ember(self, **knobs: object) -> None:
        assert self.sim is not None
        self.sim.post("/_sim/config", knobs)

    def _wait_for_web(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/accounts/login/", timeout=5).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            assert self.web is not None
            if self.web.proc.poll() is not None:
                break
            time.sleep(0.2)
        raise AssertionError(f"the web server did not start:\n{self.web and self.web.output()}")

    def start_worker(self) -> None:
        self.worker = Process("worker", self.stack.popen(sys.executable, "manage.py", "run_worker"))
        self.worker.wait_for("Avatars worker running")

    def stop_worker(self) -> None:
        assert self.worker is not None
        self.worker.stop(signal.SIGTERM)
        assert self.worker.proc.returncode == 0, self.worker.output()

    def stop(self) -> None:
        for process in (self.worker, self.web):
            if process is not None:
                process.stop()
        if self.sim is not None:
            self.sim.stop()


@pytest.fixture(scope="module")
def studio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Studio]:
    running = Studio(tmp_path_factory.mktemp("browser"))
    try:
        running.start()
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    found = browsers.find()
    if found.path is None:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the browser tests: {found.how}")
        pytest.skip(found.how)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=found.path, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Browser, studio: Studio) -> Iterator[Page]:
    context = browser.new_context(base_url=studio.url, viewport={"width": 1200, "height": 900})
    context.set_default_timeout(15_000)
    opened = context.new_page()
    try:
        yield opened
    finally:
        context.close()


# --- what a person does ----------------------------------------------------------------


def sign_in(page: Page) -> None:
    page.goto("/")
    expect(page).to_have_url(re.compile(r"/accounts/login/\?next=/$"))
    page.get_by_label("Username").fill(USERNAME)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Batches")).to_be_visible()


def go(page: Page, name: str) -> None:
    """Follow a link in the studio's navigation."""
    page.get_by_role("navigation", name="Studio").get_by_role("link", name=name, exact=True).click()


def portrait_png(path: Path) -> Path:
    img = Image.new("RGB", (320, 240), (236, 214, 190))
    draw = ImageDraw.Draw(img)
    draw.ellipse((110, 40, 210, 150), fill=(120, 80, 60))
    draw.rectangle((90, 150, 230, 240), fill=(40, 90, 160))
    out = io.BytesIO()
    img.save(out, "PNG")
    path.write_bytes(out.getvalue())
    return path


def plan_batch(page: Page, *, prompt: str, subject: str = "Bo", candidates: int = 2) -> str:
    """Fill in the new-batch form and return the batch page's URL."""
    go(page, "New batch")
    page.get_by_label("Prompt", exact=True).fill(prompt)
    page.get_by_label(subject, exact=True).check()
    page.locator('input[name="candidates_openai"]').fill(str(candidates))
    page.get_by_role("button", name="Plan batch").click()
    expect(page.get_by_role("heading", name=prompt)).to_be_visible()
    return page.url


def wait_until_finished(page: Page, total: int) -> None:
    expect(page.get_by_test_id("progress-text")).to_have_text(
        f"{total} of {total} finished", timeout=SLOW
    )


def loaded_thumbnails(page: Page, scope: str = "[data-testid=task] img") -> int:
    return page.eval_on_selector_all(
        scope, "imgs => imgs.filter(i => i.complete && i.naturalWidth > 0).length"
    )


def asset_ids_on(page: Page) -> list[int]:
    """Return the asset ids of the batch page's results, in row order."""
    hrefs = page.eval_on_selector_all(
        "[data-testid=task] td.thumb a", "links => links.map(a => a.getAttribute('href'))"
    )
    return [int(href.strip("/").split("/")[1]) for href in hrefs]


# --- scenarios --------------------------------------------------------------------------


def test_it_uploads_a_photo_and_watches_a_batch_finish_without_a_reload(page: Page, tmp_path: Path):
    sign_in(page)

    go(page, "Subjects")
    page.get_by_label("New subject").fill("Ada")
    page.get_by_role("button", name="Add subject").click()
    expect(page.get_by_role("heading", name="Ada")).to_be_visible()
    page.get_by_label("Add a reference photo").set_input_files(portrait_png(tmp_path / "ada.png"))
    page.get_by_role("button", name="Upload").click()
    expect(page.get_by_text("Added ada.png to Ada's photos.")).to_be_visible()
    expect(page.locator(".grid img")).to_have_count(1)
    page.wait_for_function(
        "() => [...document.querySelectorAll('.grid img')].every(i => i.naturalWidth > 0)"
    )

    plan_batch(page, prompt="Ada, a friendly watercolour portrait", subject="Ada")
    progress = page.get_by_test_id("progress")
    expect(progress).to_be_visible()
    # Set after the page loaded: a full reload would wipe it.
    page.evaluate("window.sameDocument = true")

    wait_until_finished(page, 2)
    expect(page.get_by_test_id("task-state")).to_have_text(["done", "done"])
    expect(page.get_by_test_id("paid")).to_have_text("Paid Ember requests: 2")
    expect(progress).to_have_attribute("value", "2")
    page.wait_for_function(
        "() => [...document.querySelectorAll('[data-testid=task] img')]"
        ".filter(i => i.complete && i.naturalWidth > 0).length === 2",
        timeout=SLOW,
    )
    assert loaded_thumbnails(page) == 2
    assert page.evaluate("window.sameDocument") is True
    expect(page.get_by_test_id("worker")).to_have_text("Worker running")
    page.screenshot(path=str(SCREENSHOT), full_page=True)


def test_it_cancels_a_batch_that_is_still_queued(page: Page, studio: Studio):
    sign_in(page)
    studio.stop_worker()
    try:
        plan_batch(page, prompt="Bo in a hat, nobody sends this", candidates=3)
        expect(page.get_by_test_id("task-state")).to_have_text(["queued"] * 3)

        page.get_by_role("button", name="Cancel batch").click()

        expect(page.get_by_text("Cancelled 3 tasks; kept 0 already with Ember.")).to_be_visible()
        expect(page.get_by_test_id("task-state")).to_have_text(["cancelled"] * 3)
        expect(page.get_by_test_id("progress-text")).to_have_text("3 of 3 finished")
        expect(page.get_by_test_id("paid")).to_have_text("Paid Ember requests: 0")
        expect(page.get_by_role("button", name="Cancel batch")).to_have_count(0)
    finally:
        studio.start_worker()


def test_it_builds_reorders_and_publishes_a_set(page: Page):
    sign_in(page)
    plan_batch(page, prompt="Bo for the family set", candidates=2)
    wait_until_finished(page, 2)
    first, second = asset_ids_on(page)

    go(page, "Sets")
    page.get_by_label("New set").fill("Family")
    page.get_by_role("button", name="Create set").click()
    expect(page.get_by_role("heading", name="Family")).to_be_visible()
    page.locator(f'input[name="assets"][value="{first}"]').check()
    page.locator(f'input[name="assets"][value="{second}"]').check()
    page.get_by_role("button", name="Add chosen").click()
    chosen = page.locator("[data-testid=chosen] > li")
    expect(chosen).to_have_count(2)
    top, bottom = (chosen.nth(i).get_attribute("data-asset") for i in (0, 1))
    assert {top, bottom} == {str(first), str(second)}

    chosen.nth(0).get_by_role("button", name="Down").click()
    expect(chosen.nth(0)).to_have_attribute("data-asset", str(bottom))
    expect(chosen.nth(1)).to_have_attribute("data-asset", str(top))

    page.get_by_role("button", name="Publish").click()
    expect(page.get_by_text("Published Family.")).to_be_visible()
    expect(page).to_have_url(re.compile(r"/sets/\d+/published/$"))
    shown = page.locator("[data-testid=published] a")
    expect(shown).to_have_count(2)
    expect(shown.nth(0)).to_have_attribute("href", f"/assets/{bottom}/original/")
    expect(shown.nth(1)).to_have_attribute("href", f"/assets/{top}/original/")
    page.wait_for_function(
        "() => [...document.querySelectorAll('[data-testid=published] img')]"
        ".every(i => i.complete && i.naturalWidth > 0)"
    )
    expect(page.get_by_role("button", name="Publish")).to_have_count(0)


def test_it_refuses_to_publish_while_an_images_history_is_missing(page: Page, studio: Studio):
    sign_in(page)
    studio.configure_ember(fail_history_writes=True)
    try:
        plan_batch(page, prompt="Bo whose history Ember lost", candidates=1)
        expect(page.get_by_test_id("task-state")).to_have_text(["history_missing"], timeout=SLOW)
        page.wait_for_function(
            "() => document.querySelector('[data-testid=task] img')?.naturalWidth > 0"
        )
        [lost] = asset_ids_on(page)
    finally:
        studio.configure_ember(fail_history_writes=False)

    go(page, "Sets")
    page.get_by_label("New set").fill("Needs repair")
    page.get_by_role("button", name="Create set").click()
    page.locator(f'input[name="assets"][value="{lost}"]').check()
    page.get_by_role("button", name="Add chosen").click()
    expect(page.locator("[data-testid=chosen] > li")).to_have_count(1)

    page.get_by_role("button", name="Publish").click()

    expect(page.locator(".message.error")).to_have_text(PUBLISH_REFUSED)
    expect(page.get_by_role("heading", name="Needs repair")).to_be_visible()
    expect(page.get_by_role("button", name="Publish")).to_be_visible()


def test_an_operator_repairs_missing_history_from_the_admin(page: Page, studio: Studio):
    sign_in(page)
    studio.configure_ember(fail_history_writes=True)
    try:
        batch_url = plan_batch(page, prompt="Bo, repaired by an operator", candidates=1)
        expect(page.get_by_test_id("task-state")).to_have_text(["history_missing"], timeout=SLOW)
    finally:
        studio.configure_ember(fail_history_writes=False)
    assert studio.sim is not None
    studio.sim.post("/_sim/history/repair")  # Ember's own repair of its history rows
    batch_id = batch_url.rstrip("/").split("/")[-1]

    page.goto(f"/admin/studio/task/?batch__id__exact={batch_id}")
    expect(page.get_by_text("worker running", exact=False).first).to_be_visible()
    row = page.locator("#result_list tbody tr")
    expect(row).to_have_count(1)
    expect(row).to_contain_text("History Missing")
    row.locator("input.action-select").check()
    page.locator("select[name=action]").select_option("reconcile_tasks")
    page.get_by_role("button", name="Go").click()

    expect(page.locator(".messagelist").first).to_contain_text("copying")
    # The worker owns the copy: it finds the original already saved and records the history.
    page.goto(batch_url)
    expect(page.get_by_test_id("task-state")).to_have_text(["done"], timeout=SLOW)
    page.goto(f"/admin/studio/task/?batch__id__exact={batch_id}")
    expect(page.locator("#result_list tbody tr")).to_contain_text("Done")
