"""A reference photo's upload whose multipart part is not a file says so (docs/api.md)."""

import pytest

from tests.api.calls import API, error
from tests.factories import png_bytes

pytestmark = pytest.mark.django_db


def multipart(disposition: str, data: bytes) -> tuple[bytes, str]:
    """Return a one-part multipart body whose part has `disposition`, and its Content-Type."""
    boundary = "avatars-test-boundary"
    body = (
        (
            f"--{boundary}\r\nContent-Disposition: form-data; {disposition}\r\n"
            f"Content-Type: image/png\r\n\r\n"
        ).encode()
        + data
        + f"\r\n--{boundary}--\r\n".encode()
    )
    return body, f"multipart/form-data; boundary={boundary}"


def test_a_file_part_without_a_file_name_is_told_it_is_text_not_a_file(api, subject):
    """Found by a review: it was told to send the photo as the field `file`, which it was."""
    body, content_type = multipart('name="file"', png_bytes(3))

    response = api.post(f"{API}/subjects/{subject.pk}/references", body, content_type=content_type)

    assert response.status_code == 400
    assert error(response)["message"].startswith("The multipart field `file` has no file name")


@pytest.mark.parametrize("name", [".", "..", "/"])
def test_a_file_part_whose_name_is_no_file_name_is_told_so(api, subject, name):
    """Found by a hostile-files review: a part named "." was told to send the photo as the
    field `file`, which it was. Django's parser leaves out a part whose file name is none
    once cleaned, so the answer says a file name is needed too."""
    body, content_type = multipart(f'name="file"; filename="{name}"', png_bytes(4))

    response = api.post(f"{API}/subjects/{subject.pk}/references", body, content_type=content_type)

    assert response.status_code == 400
    assert error(response)["message"] == (
        "Send the photo as the multipart field `file`, under a file name (such as photo.jpg)."
    )
