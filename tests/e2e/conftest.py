"""Fixtures for the tests that start real processes: everything in this folder is `e2e`.

`stack` is an install of its own (a copy of one migrated template) talking to `sim`, an
Ember simulator started for the test; a module that wants other simulator knobs, or one
simulator for all its tests, overrides `sim`. `served` is one install's server for a
whole module (tests/e2e/wire.py's `limited`); a module that wants other limits overrides
it. A test that asks for a browser page is also marked `browser`, so `make test` can say
how many browser tests did not run when no chromium could be had.
"""

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, sync_playwright

from tests import browsers
from tests.e2e.studio import CHROMIUM_ARGS, DESKTOP, PHONE, Studio, policy_refusals, sign_in
from tests.e2e.wire import limited
from tests.processes import (
    Simulator,
    Stack,
    Template,
    Web,
    migrated_template,
    new_stack,
    simulator,
)

HERE = Path(__file__).parent


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.e2e)
            if {"browser", "page", "phone", "person"} & set(getattr(item, "fixturenames", ())):
                item.add_marker(pytest.mark.browser)


@pytest.fixture(scope="session")
def template(tmp_path_factory: pytest.TempPathFactory) -> Template:
    """Migrate one install for the whole run; every stack copies it instead of migrating."""
    return migrated_template(tmp_path_factory.mktemp("template"))


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[Simulator]:
    """Start Ember's simulator for one test (override this fixture for other knobs)."""
    with simulator(tmp_path / "sim") as running:
        yield running


@pytest.fixture
def stack(sim: Simulator, template: Template, tmp_path: Path) -> Stack:
    """Copy the migrated template into a fresh install that talks to `sim`."""
    sim.post("/_sim/reset")  # a simulator a module shares forgets the last test's jobs
    return new_stack(template, tmp_path / "install", sim)


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, template: Template
) -> Iterator[tuple[Web, Stack, Path, str, int]]:
    with limited(tmp_path_factory.mktemp("served"), template) as served:
        yield served


@pytest.fixture(scope="module")
def studio(tmp_path_factory: pytest.TempPathFactory, template: Template) -> Iterator[Studio]:
    running = Studio(tmp_path_factory.mktemp("browser"), template)
    try:
        running.start()
        yield running
    finally:
        running.stop()


# Module scope, not session: Playwright's sync API keeps an event loop running in the main
# thread while it is open, and every later test that calls async code (async_to_sync) fails.
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
    """A page at a desktop's size; whatever it shows must keep to the studio's policy."""
    context = browser.new_context(base_url=studio.url, viewport=DESKTOP)
    yield from watched(context)


@pytest.fixture
def phone(browser: Browser, studio: Studio) -> Iterator[Page]:
    """A page at a phone's size (390 x 844), touch and all."""
    context = browser.new_context(
        base_url=studio.url, viewport=PHONE, is_mobile=True, has_touch=True
    )
    yield from watched(context)


def watched(context: BrowserContext) -> Iterator[Page]:
    """Open a page in `context`; once the test is done, fail it if the browser refused
    anything the Content-Security-Policy forbids (a script, a style, an image)."""
    context.set_default_timeout(15_000)
    refused = policy_refusals(context)
    opened = context.new_page()
    try:
        yield opened
    finally:
        context.close()
    assert not refused, f"the browser refused {len(refused)} thing(s) by policy: {refused}"


@pytest.fixture(params=["desktop", "phone"])
def person(request: pytest.FixtureRequest) -> Page:
    """A signed-in person at either size."""
    page: Page = request.getfixturevalue("page" if request.param == "desktop" else "phone")
    sign_in(page)
    return page


@pytest.fixture
def no_worker(studio: Studio) -> Iterator[None]:
    """Nothing is sent to Ember while the test runs: tasks stay where they were planned."""
    studio.stop_worker()
    try:
        yield
    finally:
        studio.start_worker()
