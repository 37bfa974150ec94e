"""`manage.py api_token USERNAME [--create-user] [--read-only]`: issue a JSON API token.

See docs/api.md.
"""

from typing import Any

from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from studio.api.auth import issue_token
from studio.management.ready import require_migrated


class Command(BaseCommand):
    help = "Print a new JSON API token for a user, as the last line of the output."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username", help="the user the token acts as")
        parser.add_argument(
            "--create-user",
            action="store_true",
            help="create the user (without a password) if there is none",
        )
        parser.add_argument(
            "--read-only",
            action="store_true",
            help="issue a token that may only read (every write answers 403)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        require_migrated()
        username = options["username"]
        user = User.objects.filter(username=username).first()
        if user is None:
            if not options["create_user"]:
                raise CommandError(f"Unknown user: {username}. Pass --create-user to create it.")
            _check_username(username)
            # No usable password: this user signs in to the API only, with the token.
            user = User.objects.create_user(username=username)
            self.stdout.write(f"Created user {username}.")
        elif not user.is_active:
            # Its token would be answered 401 at once (found by a review: printed silently).
            raise CommandError(
                f"The user {username} is not active, so a token would not work: make the "
                "user active in the admin first."
            )
        read_only = options["read_only"]
        token = issue_token(user=user, read_only=read_only)
        kind = "read-only API token" if read_only else "API token"
        self.stdout.write(f"New {kind} for {username}. Only its hash is stored; keep it now:")
        # Last line, alone, so scripts can take it with `tail -n 1`.
        self.stdout.write(token)


def _check_username(username: str) -> None:
    """Refuse a name Django's own user rules refuse (a space, over 150 characters, …)."""
    field = User._meta.get_field("username")
    try:
        field.clean(username, None)
    except ValidationError as exc:
        raise CommandError(f"Not a username: {' '.join(exc.messages)}") from None
