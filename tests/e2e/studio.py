"""A running studio for the browser tests, and what a person does in it.

Everything runs as it would for a person: uvicorn serves the pages, `run_worker` drives the
tasks through the Ember simulator, and Playwright clicks. Waits are bounded.
"""

import io
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from axe_playwright_python.sync_playwright import Axe
from PIL import Image, ImageDraw
from playwright.sync_api import BrowserContext, ConsoleMessage, Locator, Page, expect

from studio.serving import studio_command
from tests.processes import Simulator, Template, free_port, new_stack

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
SLOW = 60_000  # milliseconds: a batch goes through the worker and the simulator
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}
# Screenshots of the main pages, kept for a reviewer who does not run the suite.
SCREENSHOTS = Path(
    os.environ.get("AVATARS_SCREENSHOTS", Path(__file__).parents[2] / "test-output/screenshots")
)
SERIOUS = ("serious", "critical")

SEED = f"""
from django.contrib.auth.models import User
from studio import engine
from tests.factories import png_bytes
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

    def __init__(self, tmp: Path, template: Template) -> None:
        self.tmp = tmp
        self.template = template
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.sim: Simulator | None = None
        self.web: Process | None = None
        self.worker: Process | None = None

    def start(self) -> None:
        self.sim = Simulator(self.tmp, job_seconds=0.5)
        self.stack = new_stack(self.template, self.tmp / "install", self.sim)
        # Poll Ember faster than the default so a batch finishes in seconds, not tens.
        self.stack.env["AVATARS_POLL_INTERVAL"] = "0.5"
        self.stack.django(SEED)
        self.web = Process(
            "uvicorn",
            self.stack.popen(*studio_command(sys.executable, self.port)),
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


def policy_refusals(context: BrowserContext) -> list[str]:
    """Collect what Chromium refuses by the page's Content-Security-Policy, in `context`.

    Chromium says each refusal on the console ("Refused to execute inline script because
    it violates the following Content Security Policy directive: ...").
    """
    refused: list[str] = []

    def heard(message: ConsoleMessage) -> None:
        if "Content Security Policy" in message.text:
            refused.append(f"{message.page.url if message.page else '?'}: {message.text}")

    context.on("console", heard)
    return refused


# --- what a person does ----------------------------------------------------------------


def sign_in(page: Page) -> None:
    page.goto("/")
    expect(page).to_have_url(re.compile(r"/accounts/login/\?next=/$"))
    page.get_by_label("Username").fill(USERNAME)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Batches")).to_be_visible()


def go(page: Page, name: str) -> None:
    """Follow a link in the studio's navigation, to the page's script having run (what a
    test does next is meant for the page as set up, not for the moments before)."""
    page.get_by_role("navigation", name="Studio").get_by_role("link", name=name, exact=True).click()
    page.wait_for_load_state("domcontentloaded")


def add_subject(page: Page, name: str) -> None:
    """Add a subject from the Subjects page, to its own page being shown."""
    go(page, "Subjects")
    page.get_by_label("New subject").fill(name)
    page.get_by_role("button", name="Add subject").click()
    expect(page.get_by_role("heading", name=name, exact=True)).to_be_visible()


def open_subject(page: Page, name: str) -> None:
    """Open a subject's page from the Subjects page."""
    go(page, "Subjects")
    page.get_by_role("link", name=name, exact=True).click()
    expect(page.get_by_role("heading", name=name, exact=True)).to_be_visible()


def portrait_png(path: Path) -> Path:
    img = Image.new("RGB", (320, 240), (236, 214, 190))
    draw = ImageDraw.Draw(img)
    draw.ellipse((110, 40, 210, 150), fill=(120, 80, 60))
    draw.rectangle((90, 150, 230, 240), fill=(40, 90, 160))
    out = io.BytesIO()
    img.save(out, "PNG")
    path.write_bytes(out.getvalue())
    return path


def fill_batch(page: Page, *, prompt: str, subject: str = "Bo", candidates: int = 2) -> None:
    """Open the new-batch form and fill it in: one subject, GPT Image candidates, one frame."""
    go(page, "New batch")
    page.get_by_label("Prompt", exact=True).fill(prompt)
    page.get_by_label(subject, exact=True).check()
    page.locator('input[name="candidates_openai"]').fill(str(candidates))


def start_button(page: Page) -> Locator:
    """The form's button, which names the spend ("Start 2 paid jobs")."""
    return page.get_by_role("button", name=re.compile(r"^Start \d+ paid jobs?$"))


def cancel_batch(page: Page) -> None:
    """Press "Cancel batch…", then the question's "Yes, cancel them"."""
    page.get_by_text("Cancel batch…").click()
    page.get_by_role("button", name="Yes, cancel them").click()


def plan_batch(page: Page, *, prompt: str, subject: str = "Bo", candidates: int = 2) -> str:
    """Fill in the new-batch form, start it, and return the batch page's URL."""
    fill_batch(page, prompt=prompt, subject=subject, candidates=candidates)
    expect(start_button(page)).to_have_text(f"Start {candidates} paid job{'s' * (candidates != 1)}")
    start_button(page).click()
    expect(page.get_by_role("heading", name=prompt)).to_be_visible()
    return page.url


def wait_until_finished(page: Page, total: int) -> None:
    """Wait until all `total` images of the batch on the page are ready."""
    expect(page.get_by_test_id("progress-text")).to_have_text(f"{total} ready", timeout=SLOW)


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


# --- what a reviewer looks at ----------------------------------------------------------


# What reaches past the screen's right edge, for a failure's message.
PAST_THE_EDGE = """width => [...document.querySelectorAll("body *")]
  .filter(e => e.getBoundingClientRect().right > width + 1)
  .slice(-6)
  .map(e => `${e.tagName.toLowerCase()}.${e.className} ${e.getBoundingClientRect().right}px`)"""


def fits_the_screen(page: Page) -> None:
    """Fail if the page scrolls sideways at its viewport's width, naming what sticks out.

    Measured once the page has loaded: the load event waits for the stylesheet, and a page
    laid out before it is in (which a person never sees painted) is as wide as its longest
    unbroken word. On a busy machine that race was lost.
    """
    page.wait_for_load_state()
    width = (page.viewport_size or DESKTOP)["width"]
    scroll = page.evaluate("document.documentElement.scrollWidth")
    assert scroll <= width, (
        f"{page.url} is {scroll} px wide at {width} px: {page.evaluate(PAST_THE_EDGE, width)}"
    )


def audit(page: Page) -> None:
    """Fail on any serious or critical accessibility violation axe-core finds on the page."""
    found = Axe().run(page).response["violations"]
    bad = [v for v in found if v.get("impact") in SERIOUS]
    lines = [
        f"{v['id']} ({v['impact']}): {v['help']} at {[n['target'] for n in v['nodes']][:3]}"
        for v in bad
    ]
    assert not bad, f"{len(bad)} serious accessibility violations on {page.url}:\n" + "\n".join(
        lines
    )


def screenshot(page: Page, name: str) -> Path:
    """Keep a full-page screenshot under the test run's output, named for the page and size."""
    width = (page.viewport_size or DESKTOP)["width"]
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}-{width}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def size(page: Page) -> str:
    """Name the page's size as the tests' ids do: "phone" below 600 px wide, else "desktop"."""
    return "phone" if (page.viewport_size or {"width": 0})["width"] < 600 else "desktop"
