"""Bearer tokens for the JSON API: issued once, stored only as their SHA-256."""

import hashlib
import hmac
import logging
import secrets
from datetime import timedelta

from django.contrib.auth.models import User
from django.db import DatabaseError
from django.db.models import Q
from django.http import HttpRequest
from django.utils import timezone

from studio.models import ApiToken

log = logging.getLogger("studio.api")

# Recording every use would turn each API read into a write that queues behind
# the worker on SQLite's single write lock; once a minute still says "in use".
LAST_USED_RESOLUTION = timedelta(minutes=1)


def digest_of(token: str) -> str:
    """Return the SHA-256 hex digest under which `token` is stored."""
    return hashlib.sha256(token.encode()).hexdigest()


def issue_token(*, user: User, read_only: bool = False) -> str:
    """Create a new API token for `user` and return it; only its digest is kept.

    A read-only token may call the GET routes only, whatever its user may do.
    """
    token = secrets.token_urlsafe(32)
    scope = ApiToken.Scope.READ_ONLY if read_only else ApiToken.Scope.READ_WRITE
    ApiToken.objects.create(user=user, digest=digest_of(token), scope=scope)
    return token


def authenticate(request: HttpRequest) -> ApiToken | None:
    """Return the token the request bears, with its active user (noting its use), or None."""
    row = _token_row(request.headers.get("Authorization", ""))
    if row is None:
        return None
    _touch(row)
    return row


def token_for_header(header: str) -> ApiToken | None:
    """Return the token an `Authorization` header bears, with its active user, writing nothing."""
    return _token_row(header)


def _token_row(header: str) -> ApiToken | None:
    token = _bearer_token(header)
    if token is None:
        return None
    digest = digest_of(token)
    row = ApiToken.objects.select_related("user").filter(digest=digest).first()
    # The lookup already matched, but a database may compare case-insensitively
    # or pad; the digest must be equal byte for byte, compared in constant time.
    if row is None or not hmac.compare_digest(row.digest, digest):
        return None
    if not row.user.is_active:
        return None
    return row


def _bearer_token(header: str) -> str | None:
    """Return the token of `Bearer <token>`: the scheme in any case, one or more spaces."""
    parts = header.split(" ")
    words = [part for part in parts if part]
    if len(words) != 2 or parts[0].lower() != "bearer":
        return None
    return words[1]


def _touch(row: ApiToken) -> None:
    now = timezone.now()
    if row.last_used_at is not None and now - row.last_used_at < LAST_USED_RESOLUTION:
        return
    # Conditional, so that concurrent requests record the minute once.
    unused = ApiToken.objects.filter(pk=row.pk).filter(
        Q(last_used_at__isnull=True) | Q(last_used_at__lt=now - LAST_USED_RESOLUTION)
    )
    # A note for people, not the request's business: on a full database disk, every API
    # call failed on it, reads too (a review); the request says what its own writes meet.
    try:
        unused.update(last_used_at=now)  # in autocommit: a refused write leaves nothing open
    except DatabaseError as exc:
        log.warning("token %s: when it was last used could not be noted: %s", row.pk, exc)
