"""The new-batch form sent from several tabs at once, over a real uvicorn (the README's way)."""

import re
import secrets
from concurrent.futures import ThreadPoolExecutor

import httpx

from tests.e2e.wire import signed_in_cookies

TABS = 4
COUNT = """
from studio.models import Batch
result = Batch.objects.filter(request__prompt={prompt!r}).count()
"""
PHOTO = """
from studio import engine
from studio.models import Subject
from tests.factories import png_bytes
subject = Subject.objects.get(name="Ada")
result = engine.add_reference(subject=subject, data=png_bytes(5), file_name="ada.png").pk
"""


def test_the_same_batch_sent_from_four_tabs_at_once_is_planned_once(served):
    """Found by a review: four tabs' forms of one batch, sent at the same moment, planned
    four paid batches without asking; one after the other, the second was asked about."""
    web, stack, _spool, _token, subject_id = served
    photo = stack.django(PHOTO)
    cookies = signed_in_cookies(web)
    with httpx.Client(base_url=web.url, cookies=cookies) as browser:
        page = browser.get("/batches/new/")
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    assert csrf, page.text[:500]
    prompt = f"four tabs at once {secrets.token_hex(4)}"
    form = {
        "csrfmiddlewaretoken": csrf[1],
        "title": "Tabs",
        "prompt": prompt,
        "subjects": str(subject_id),
        "references": str(photo),
        "frames": "image",
        "candidates_openai": "1",
        "candidates_flux": "0",
        "candidates_google": "0",
    }

    def tab(_: int) -> httpx.Response:
        with httpx.Client(base_url=web.url, cookies=cookies, timeout=30) as client:
            # Each tab's form carries its own one-time token, as a freshly rendered one does.
            return client.post("/batches/new/", data={**form, "token": secrets.token_urlsafe(24)})

    with ThreadPoolExecutor(TABS) as pool:
        answers = list(pool.map(tab, range(TABS)))

    codes = [answer.status_code for answer in answers]
    planned = stack.django(COUNT.format(prompt=prompt))
    assert planned == 1, f"{planned} paid batches planned from {TABS} tabs at once; answers {codes}"
    assert sorted(codes) == [200] * (TABS - 1) + [302], codes
    for answer in answers:
        if answer.status_code == 200:
            assert "You started the same batch" in answer.text
