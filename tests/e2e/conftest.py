"""Fixtures for the tests that start real processes: everything in this folder is `e2e`.

A test that asks for a browser page is also marked `browser`, so `make test` can say how many
browser tests did not run when no chromium could be had.
"""

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from tests import browsers
from tests.e2e.studio import CHROMIUM_ARGS, DESKTOP, PHONE, Studio

HERE = Path(__file__).parent


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.e2e)
            if {"browser", "page", "phone"} & set(getattr(item, "fixturenames", ())):
                item.add_marker(pytest.mark.browser)


@pytest.fixture(scope="module")
def studio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Studio]:
    running = Studio(tmp_path_factory.mktemp("browser"))
    try:
        running.start()
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="session")
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
    context = browser.new_context(base_url=studio.url, viewport=DESKTOP)
    context.set_default_timeout(15_000)
    opened = context.new_page()
    try:
        yield opened
    finally:
        context.close()


@pytest.fixture
def phone(browser: Browser, studio: Studio) -> Iterator[Page]:
    """A page at a phone's size (390 x 844), touch and all."""
    context = browser.new_context(
        base_url=studio.url, viewport=PHONE, is_mobile=True, has_touch=True
    )
    context.set_default_timeout(15_000)
    opened = context.new_page()
    try:
        yield opened
    finally:
        context.close()
