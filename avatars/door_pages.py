"""The studio's pages the ASGI door answers with (avatars/bodylimit.py), drawn without the
database: a photo too large, one sent after its person's sign-in ended, one not let in.
"""

from collections.abc import Mapping
from urllib.parse import urlencode

from django.template.loader import render_to_string
from django.urls import reverse

from studio.web.refusals import SIGNED_OUT, photo_too_large, same_site_path


def too_large_page(headers: Mapping[str, str]) -> str:
    """Render the studio's page for a photo past the size limit, without the database.

    Its link leads back to the page the upload came from when the Referer is a page of
    this site, else to the subjects.
    """
    back = came_from(headers) or reverse("studio:subjects")
    context = {"message": photo_too_large(), "back": back}
    return render_to_string("studio/too_large.html", context)


def signed_out_page(headers: Mapping[str, str]) -> str:
    """Render the studio's page for a photo sent after its person's sign-in ended.

    Its link signs in and leads back to the page the form was on (the Referer, when a
    page of this site). Found by a review: the person got a line of plain text.
    """
    sign_in = reverse("login") + "?" + urlencode({"next": came_from(headers) or "/"})
    context = {"message": SIGNED_OUT, "sign_in": sign_in}
    return render_to_string("studio/signed_out_body.html", context)


def came_from(headers: Mapping[str, str]) -> str | None:
    return same_site_path(headers.get("referer", ""), headers.get("host", ""))


def busy_page(headers: Mapping[str, str]) -> str:
    """Render the studio's page for a photo not let in to be read (too many at once)."""
    back = came_from(headers) or reverse("studio:subjects")
    return render_to_string("studio/busy.html", {"back": back})
