"""Static files over a real uvicorn: whole, in ranges, and with nothing in the log.

Found by a review: each static file a page loads wrote a warning into the web server's log
("StreamingHttpResponse must consume synchronous iterators ..."), eight for one page, as
Django read WhiteNoise's file whole into a list before sending it.
"""

from pathlib import Path

import django
import httpx
import pytest

from tests.processes import ROOT, Stack, Web

pytestmark = pytest.mark.e2e

FILES = ("studio/studio.css", "studio/htmx.min.js", "studio/favicon.svg", "admin/css/base.css")


def source_of(name: str) -> bytes:
    """The bytes of a static file as the project or Django's admin holds them."""
    admin = Path(django.__file__).parent / "contrib" / "admin" / "static"
    found = [*ROOT.glob(f"studio/static/{name}"), *admin.glob(name)]
    assert found, name
    return found[0].read_bytes()


def test_static_files_are_sent_whole_and_in_ranges_without_a_warning(stack: Stack):
    web = Web(stack)
    try:
        with httpx.Client(base_url=web.url) as browser:
            whole = {name: browser.get(f"/static/{name}") for name in FILES}
            part = browser.get("/static/studio/htmx.min.js", headers={"Range": "bytes=10-109"})
    finally:
        web.stop()

    for name, answer in whole.items():
        assert answer.status_code == 200, name
        assert answer.content == source_of(name), f"{name} arrived changed"
    assert part.status_code == 206
    assert part.content == source_of("studio/htmx.min.js")[10:110]
    log = (stack.data_dir / "web.log").read_text()
    assert "must consume" not in log, log[-2000:]
