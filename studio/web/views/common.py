"""Helpers every studio page shares: the sign-in guard, form binding and paging."""

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import wraps
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import decorators
from django.contrib.auth.models import User
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest
from django.http.response import HttpResponseBase
from django_htmx.http import HttpResponseClientRedirect
from django_htmx.middleware import HtmxDetails

from studio.web.refusals import SIGNED_OUT, form_page

LIST_PAGE = 50  # subjects or sets per page
PAGE_DIGITS = 5  # a page number has at most these (pages past 99,999 are page 1)


def login_required(view: Callable[..., HttpResponseBase]) -> Callable[..., HttpResponseBase]:
    """Require a signed-in person; tell one whose form came after their sign-in ended.

    Django's own guard sends them to sign in without a word, and then on to the address
    the form was sent to (an action's, or a list's), where what they typed is gone. A
    form is not done; the sign-in page says so, and leads back to the page the form was
    on (its Referer, when this site's; the form's address otherwise).
    """
    guarded = decorators.login_required(view)

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if request.method == "POST" and not request.user.is_authenticated:
            messages.warning(request, SIGNED_OUT)
            return redirect_to_login(form_page(request) or request.path)
        return guarded(request, *args, **kwargs)

    return wrapper


def login_required_htmx(view: Callable[..., HttpResponseBase]) -> Callable[..., HttpResponseBase]:
    """Require a signed-in person; tell htmx to load the sign-in page rather than swap it in.

    A poll that follows a redirect would otherwise put the whole sign-in page
    inside the progress section once a session expires.
    """
    guarded = login_required(view)

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        htmx: HtmxDetails | None = getattr(request, "htmx", None)
        if htmx and not request.user.is_authenticated:
            page = htmx.current_url_abs_path or "/"
            # Said on the sign-in page: a review's live tab, signed out in another one, was
            # taken there with not a word of why.
            asked = urlencode({"next": page, "signed_out": "1"})
            return HttpResponseClientRedirect(f"{settings.LOGIN_URL}?{asked}")
        return guarded(request, *args, **kwargs)

    return wrapper


def user_of(request: HttpRequest) -> User | None:
    return request.user if isinstance(request.user, User) else None


def say_renamed(request: HttpRequest, old: str, new: str) -> None:
    """Say that `old` (a subject, a photo, "the set …") is now called `new`."""
    said = f"Renamed {old} to {new}"
    # One full stop, even when the new name ends with one ("Ada L.").
    messages.success(request, said if said.endswith(".") else f"{said}.")


def posted(request: HttpRequest, *, files: bool = False) -> tuple[Any, ...]:
    """Return the form data of a POST (even an empty one), or nothing for an unbound form."""
    if request.method != "POST":
        return ()
    return (request.POST, request.FILES) if files else (request.POST,)


@dataclass
class Window:
    """One page of a long list, found without counting the list.

    Django's Paginator runs COUNT(*) over every row to number the pages, which grows
    with history; a page only needs to know whether another one follows.
    """

    object_list: list[Any]
    number: int
    has_next: bool

    def __iter__(self) -> Iterator[Any]:
        return iter(self.object_list)

    def __len__(self) -> int:
        return len(self.object_list)

    @property
    def has_previous(self) -> bool:
        return self.number > 1

    def has_other_pages(self) -> bool:
        return self.has_previous or self.has_next

    def previous_page_number(self) -> int:
        return self.number - 1

    def next_page_number(self) -> int:
        return self.number + 1


def page_of(request: HttpRequest, items: Any, per_page: int) -> Window:
    raw = request.GET.get("page", "1")
    # isascii(): "²" is a digit to isdigit() but not to int(); and int() refuses more than
    # 4,300 digits (a review's `?page=` of 4,301 was a 500 on every listing).
    digits = raw.isascii() and raw.isdigit() and len(raw) <= PAGE_DIGITS
    number = int(raw) if digits and 0 < int(raw) < 100_000 else 1
    start = (number - 1) * per_page
    rows = list(items[start : start + per_page + 1])  # one more says a next page exists
    return Window(object_list=rows[:per_page], number=number, has_next=len(rows) > per_page)
