"""The studio's own pages for two refusals Django answers before a studio view does.

A form whose CSRF token no longer holds (open too long, or its person signed in again
elsewhere) and an address opened in the browser that only takes a form's button press
(405) would otherwise get Django's bare page or an empty body, which a browser shows as
its own error: no way back, no navigation, not sized for a phone.
"""

from urllib.parse import urlsplit

from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import Resolver404, resolve
from django.utils.deprecation import MiddlewareMixin
from django.utils.http import url_has_allowed_host_and_scheme

API_PREFIX = "/api/"  # the JSON API answers its own 405s, in JSON (studio/api/door.py)
ADMIN_PREFIX = "/admin/"  # the admin's actions keep their 405: its pages are its own
# A form sent after its person's sign-in ended: said on the sign-in page (a view's guard,
# studio/web/views/common.py) or on the door's page for a photo (avatars/bodylimit.py).
SIGNED_OUT = (
    "You were signed out, so what you sent was not done: nothing was started or paid, "
    "and nothing was saved or uploaded. Sign in to go back to the page you were on."
)
ONE_OF_SEVERAL = "X-Avatars-Photos"  # sent by photos.js with each of several photos
PHOTOS_FORM_EXPIRED = "It was not uploaded: this page had expired. Reload it and choose it again."


def photo_too_large() -> str:
    """Say that a photo passed the size cap, as each of the studio's ways of sending one
    says it (the subject page's form, the door's page, photos.js): a review read three."""
    limit = settings.AVATARS_MAX_IMAGE_BYTES / (1024 * 1024)
    return f"That photo is too large: the limit is {limit:g} MB. Nothing was uploaded."


ACTION_OPENED = (
    "That address only takes a form's button press, so here is its page: nothing was changed."
)


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """Answer a form Django refused for its CSRF token with the studio's page (403).

    Django's own view renders the template without the request, so the page would lose
    its navigation; this one is named by CSRF_FAILURE_VIEW. One of several photos sent
    one after another gets the reason alone: a page would use up what is to be said of
    the photos sent before it.
    """
    if request.headers.get(ONE_OF_SEVERAL):
        return plain_refusal(PHOTOS_FORM_EXPIRED, status=403)
    return render(request, "403_csrf.html", {"back": form_page(request)}, status=403)


def plain_refusal(reason: str, *, status: int = 400) -> HttpResponse:
    """Answer one of several photos with why it was not taken, in words alone (photos.js)."""
    return HttpResponse(reason, status=status, content_type="text/plain; charset=utf-8")


def form_page(request: HttpRequest) -> str:
    """Return the path of the page the refused form was on (its Referer, if this site's)."""
    return same_site_path(request.headers.get("referer", ""), request.get_host())


def same_site_path(referer: str, host: str) -> str:
    """Return `referer`'s path and query when it is a page of `host`, else ""."""
    if not referer or not host:
        return ""
    if not url_has_allowed_host_and_scheme(referer, allowed_hosts={host}):
        return ""
    parts = urlsplit(referer)
    if not parts.path.startswith("/"):
        return ""
    path = parts.path + (f"?{parts.query}" if parts.query else "")
    # A page of this host whose path starts "//" (http://host//evil.example/x) would
    # read, as a link, as another site's address.
    return path if url_has_allowed_host_and_scheme(path, allowed_hosts={host}) else ""


class MethodNotAllowedPage(MiddlewareMixin):
    """Give the studio's empty 405 answers a page that says what the address is for.

    An action's address opened in the browser (`/subjects/2/rename/`), typed or reached
    after signing in again (the sign-in page returns to the address a form was sent
    to), leads to the page the action belongs to, with a word about it. Others get a
    page: the status and the `Allow` header stay. Answers with a body of their own (the
    API's JSON) are left as they are.
    """

    def process_response(self, request: HttpRequest, response: HttpResponse) -> HttpResponse:
        if (
            response.status_code != 405
            or request.path.startswith(API_PREFIX)
            or getattr(response, "streaming", False)
            or response.content
        ):
            return response
        studio_get = request.method == "GET" and not request.path.startswith(ADMIN_PREFIX)
        home = page_of_action(request.path) if studio_get else None
        if home is not None:
            messages.info(request, ACTION_OPENED)
            return redirect(home)
        page = render(request, "405.html", status=405)
        if response.has_header("Allow"):
            page["Allow"] = response["Allow"]
        return page


def page_of_action(path: str) -> str | None:
    """Return the nearest page above an action's address (`/subjects/2/` for its rename).

    None when no address above it is a page of the studio (sign-out's, say).
    """
    parts = path.strip("/").split("/")
    for end in range(len(parts) - 1, 0, -1):
        above = "/" + "/".join(parts[:end]) + "/"
        try:
            resolve(above)
        except Resolver404:
            continue
        return above
    return None
