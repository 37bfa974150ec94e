"""Paged lists for the JSON API: `{"items": [...], "next": url or null}`, by keyset.

A page is the rows after the last one the client saw, in a total order (a text column,
then the primary key), so a walk through the pages meets every row exactly once even
while rows are added, and no page counts or skips over the rows before it. The cursor
names that last row by its sort key, signed with the secret key (under a salt of its own,
so no other signed value of the project passes for one): opaque to clients, and only a
cursor this API gave out is taken.
"""

import base64
import binascii
import json
from typing import Any, TypeVar
from urllib.parse import urlencode

from django.core import signing
from django.db.models import Model, Q, QuerySet
from django.http import HttpRequest

from studio.api.http import ApiError, storable_text
from studio.ids import row_id

M = TypeVar("M", bound=Model)

PAGE_SIZE = 50  # rows per page
MAX_CURSOR = 2000  # characters; a cursor this API writes is far shorter
SALT = "studio.api.paging.cursor"
BAD_CURSOR = "The cursor is not one this API gave out; start again from the first page."


def page(
    request: HttpRequest, rows: QuerySet[M], *, key: str, size: int = PAGE_SIZE
) -> tuple[list[M], str | None]:
    """Return the page of `rows` the request's `cursor` asks for, ordered by `key` then pk,
    and the URL of the next page (None on the last one). `key` must name a text column."""
    ordered = rows.order_by(key, "pk")
    cursor = request.GET.get("cursor") or None  # "?cursor=": the first page, as the schema allows
    if cursor is not None:
        value, pk = _decode(cursor)
        ordered = ordered.filter(Q(**{f"{key}__gt": value}) | Q(**{key: value, "pk__gt": pk}))
    found = list(ordered[: size + 1])  # one more says whether a next page exists
    if len(found) <= size:
        return found, None
    last = found[size - 1]
    query = urlencode({"cursor": _encode(getattr(last, key), last.pk)})
    return found[:size], f"{request.path}?{query}"


def _signer() -> signing.Signer:
    # "." rather than ":": neither it nor base64url needs escaping in a URL.
    return signing.Signer(salt=SALT, sep=".")


def _encode(value: str, pk: Any) -> str:
    """Write the cursor after the row (`value`, `pk`): its JSON in base64url, signed."""
    # UTF-8, not \u escapes: a name of 120 emoji stays a few hundred characters.
    text = json.dumps([value, pk], ensure_ascii=False, separators=(",", ":"))
    return _signer().sign(base64.urlsafe_b64encode(text.encode()).decode().rstrip("="))


def _decode(cursor: str) -> tuple[str, int]:
    """Return the sort key and pk a cursor names, or raise a 400 ApiError."""
    if not cursor or len(cursor) > MAX_CURSOR:
        raise ApiError(400, "invalid_cursor", BAD_CURSOR)
    try:
        data = _signer().unsign(cursor)
        text = base64.urlsafe_b64decode(data + "=" * (-len(data) % 4))
        decoded = json.loads(text)
    # UnicodeEncodeError (a lone surrogate, before the signature is checked),
    # UnicodeDecodeError and JSONDecodeError are ValueErrors.
    except (signing.BadSignature, binascii.Error, ValueError):
        raise ApiError(400, "invalid_cursor", BAD_CURSOR) from None
    match decoded:
        case [str() as value, int() as pk] if row_id(pk) is not None and storable_text(value):
            return value, pk
    raise ApiError(400, "invalid_cursor", BAD_CURSOR)
