"""Failed sign-ins over a real uvicorn, with the real password hasher (docs/design.md §12):
the address counted is the one uvicorn reports, and an operator's reset lets the person in."""

import re
from collections.abc import Iterator

import httpx
import pytest

from tests.e2e.wire import limited
from tests.processes import Stack, Template, Web

LIMIT = 3
PASSWORD = "x" * 12  # the module's person, ada (tests/e2e/wire.py)


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, template: Template
) -> Iterator[tuple[Web, Stack]]:
    with limited(
        tmp_path_factory.mktemp("sign-in"), template, AVATARS_SIGN_IN_FAILURES=str(LIMIT)
    ) as (web, stack, _spool, _token, _subject_id):
        yield web, stack


def try_to_sign_in(browser: httpx.Client, password: str) -> httpx.Response:
    page = browser.get("/accounts/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    assert token, page.text[:500]
    return browser.post(
        "/accounts/login/",
        data={"username": "ada", "password": password, "csrfmiddlewaretoken": token[1]},
    )


def test_a_guesser_is_refused_after_the_limit_until_an_operator_resets_the_count(served):
    web, stack = served
    with httpx.Client(base_url=web.url) as browser:
        answers = [try_to_sign_in(browser, f"guess-{n}").status_code for n in range(LIMIT)]
        refused = try_to_sign_in(browser, PASSWORD)

        assert answers == [200] * (LIMIT - 1) + [429], answers
        assert refused.status_code == 429, refused.text[:500]
        assert refused.headers["Retry-After"] == "900"
        assert (
            "Too many failed sign-ins for this username from this address. "
            "Try again in 15 minutes." in refused.text
        )
        assert browser.get("/").status_code == 302, "signed in while refused"

        listed = stack.manage("axes_list_attempts")
        assert "ada" in listed and "127.0.0.1" in listed, listed
        stack.manage("axes_reset_username", "ada")
        let_in = try_to_sign_in(browser, PASSWORD)

        assert let_in.status_code == 302, let_in.text[:500]
        assert browser.get("/").status_code == 200


def test_an_address_a_guesser_names_in_x_forwarded_for_is_not_the_one_counted(served):
    """Found by a review: uvicorn takes `X-Forwarded-For` from 127.0.0.1 unless told not to,
    so 30 wrong passwords, each naming another address, were none refused; served as the
    demo serves the studio (studio/serving.py), the address counted is the connection's."""
    web, stack = served
    stack.manage("axes_reset_username", "ada")
    answers = []
    with httpx.Client(base_url=web.url) as browser:
        for n in range(LIMIT + 1):
            browser.headers["X-Forwarded-For"] = f"203.0.113.{n + 1}"
            answers.append(try_to_sign_in(browser, f"guess-{n}").status_code)

    assert answers == [200] * (LIMIT - 1) + [429, 429], answers
    listed = stack.manage("axes_list_attempts")
    assert "203.0.113" not in listed, listed
    stack.manage("axes_reset_username", "ada")
