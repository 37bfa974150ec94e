"""The answer to a sign-in refused because of earlier failures (django-axes counts them).

After `AVATARS_SIGN_IN_FAILURES` wrong passwords for one username from one address, that
pair's sign-ins are refused for `AVATARS_SIGN_IN_COOLOFF_MINUTES` from the last try, even
with the right password: a guesser gets a few tries a quarter of an hour, not thousands a
second. The refusal is the sign-in page again, with a 429, the reason and the wait.

Signing out says so on the page that follows: on a family's shared device, the sign-in
form alone did not tell the next person whether the last one had left (a review).
"""

import math
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.views import LogoutView
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.cache import add_never_cache_headers


def wait_minutes() -> int:
    return math.ceil(settings.AXES_COOLOFF_TIME.total_seconds() / 60)


def locked_out(request: HttpRequest, credentials: dict[str, object] | None = None) -> HttpResponse:
    """Render the sign-in page refusing this try, saying how long to wait."""
    minutes = wait_minutes()
    reason = (
        "Too many failed sign-ins for this username from this address. "
        f"Try again in {minutes} minute{'s' if minutes != 1 else ''}."
    )
    username = str((credentials or {}).get("username") or request.POST.get("username", ""))
    form = AuthenticationForm(request, initial={"username": username[:150]})
    next_page = request.POST.get("next") or request.GET.get("next") or ""
    response = render(
        request,
        "registration/login.html",
        {"form": form, "locked_out": reason, "next": next_page},
        status=429,
    )
    response["Retry-After"] = str(minutes * 60)
    add_never_cache_headers(response)
    return response


class SignInForm(AuthenticationForm):
    """Django's sign-in form, its fields marked wrong and tied to the error when refused.

    A review found the wrong-password sentence was a plain paragraph a screen reader did
    not announce, and the fields said nothing of it.
    """

    def is_valid(self) -> bool:
        valid = super().is_valid()
        if not valid:
            for field in ("username", "password"):
                attrs = self.fields[field].widget.attrs
                attrs.update({"aria-invalid": "true", "aria-describedby": "sign-in-error"})
        return valid


SIGNED_OUT = "You are signed out."


class SignOut(LogoutView):
    """Sign out, and say so on the page that follows."""

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        response = super().post(request, *args, **kwargs)
        messages.info(request, SIGNED_OUT)  # kept in a cookie: the session is gone
        return response
