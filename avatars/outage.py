"""The database out of reach: a 503 that says so, and one log line instead of a traceback.

A disk gone read-only or full, a database file gone, a PostgreSQL server down: every
request then fails where it first reads a row (its session, its token), and each was
answered "Something went wrong here", an error "of its own", in two 130-line tracebacks
a request (a review's, on a read-only data dir). Such a failure is not a bug of a page:
it says Service Unavailable, names the cause in the log in one line, and the same page
answers again once the database can be used. Any other database error is still a 500
with its traceback: a bug, or a migration not run, is for the people who read the log.
Which errors are which: studio/dbfaults.py.
"""

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string
from django.utils.cache import add_never_cache_headers

from studio.web.refusals import same_site_path

# What a client is told to wait before it asks again, in seconds.
RETRY_AFTER = 30
CODE = "database_unavailable"
MESSAGE = "Avatars cannot use its database right now; try again in a minute."


def api_answer() -> JsonResponse:
    """Answer an API request with 503 `database_unavailable` in the API's error shape."""
    response = JsonResponse({"error": {"code": CODE, "message": MESSAGE}}, status=503)
    add_never_cache_headers(response)
    response["Retry-After"] = str(RETRY_AFTER)
    return response


def page_html(*, sent: bool, here: str, back: str) -> str:
    """Render the studio's page for it, drawn without the database (no session, no user).

    `sent`: the request carried a form, which was not saved (a review's page said only that
    "this page could not be shown"); `back` is the page it came from, `here` what was asked.
    """
    return render_to_string("503.html", {"sent": sent, "here": here, "back": back or "/"})


def page(request: HttpRequest) -> HttpResponse:
    """Answer a page of the studio with 503 and the page that says why."""
    sent = request.method not in ("GET", "HEAD")
    back = same_site_path(request.headers.get("referer", ""), request.get_host())
    response = HttpResponse(page_html(sent=sent, here=request.path, back=back), status=503)
    add_never_cache_headers(response)
    response["Retry-After"] = str(RETRY_AFTER)
    return response
