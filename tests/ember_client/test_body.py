"""A submit's body as sent: the photos' base64 spliced in as bytes, the same JSON as text."""

import base64
import json

from hypothesis import given
from hypothesis import strategies as st

from studio.ember.client import PHOTO_MARK, encode_payload


def payload(prompt: str, photos: list[bytes], *, as_bytes: bool) -> dict:
    references = [
        {
            "name": f"ref-{n}.png",
            "sha256": "0" * 64,
            "mime": "image/png",
            "data": base64.b64encode(photo) if as_bytes else base64.b64encode(photo).decode(),
        }
        for n, photo in enumerate(photos)
    ]
    return {"kind": "image", "prompt": prompt, "references": references, "source_metadata": {}}


@given(
    prompt=st.text(max_size=40) | st.just(f"a prompt holding {PHOTO_MARK} itself"),
    photos=st.lists(st.binary(max_size=64), max_size=4),
)
def test_it_sends_the_same_json_whether_the_photos_come_as_bytes_or_as_text(prompt, photos):
    spliced = encode_payload(payload(prompt, photos, as_bytes=True))
    plain = encode_payload(payload(prompt, photos, as_bytes=False))

    assert json.loads(spliced) == json.loads(plain) == payload(prompt, photos, as_bytes=False)
    assert spliced.isascii()
