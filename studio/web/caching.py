"""What a signed-in person is shown is theirs: no browser history or shared cache keeps it."""

from django.http import HttpRequest, HttpResponseBase
from django.utils.cache import add_never_cache_headers
from django.utils.deprecation import MiddlewareMixin


class PrivatePages(MiddlewareMixin):
    """Tell browsers and proxies to keep no copy of an answer to a signed-in person.

    Without it a page came back from the browser's history after signing out, and a proxy
    was not told it was private. The header is the one Django's `never_cache` gives the
    sign-in page and the admin. An answer that sets its own Cache-Control keeps it: the
    pictures, which never change under their hash. Static files never get this far
    (WhiteNoise answers them first).
    """

    def process_response(
        self, request: HttpRequest, response: HttpResponseBase
    ) -> HttpResponseBase:
        # Looked at first: the person is not looked up for an answer that says already.
        # An answer to a database out of reach does, and looking the person up read the
        # session again and failed again: two log lines a request (a review's).
        if response.has_header("Cache-Control"):
            return response
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            add_never_cache_headers(response)
        return response
