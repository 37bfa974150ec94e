#!/usr/bin/env python
"""Django's command-line utility for Avatars."""

import os
import signal
import sys


def main() -> None:
    from avatars.early import note_sigterm

    note_sigterm(sys.argv)  # before Django's start-up, which a stop must not crash
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "avatars.settings")
    try:
        run(sys.argv)
    except KeyboardInterrupt:
        # Ctrl-C that no command's own handler had yet (Django's start-up, half a second):
        # a sentence, not a traceback through Django's imports (a review). Then the end a
        # Ctrl-C gives, by the signal itself: a shell's loop over commands stops there too.
        print("Interrupted (Ctrl-C).", file=sys.stderr)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)


def run(argv: list[str]) -> None:
    """Run the command, a setting or a database it cannot use said in one sentence."""
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line
    from django.db import DatabaseError, OperationalError

    try:
        execute_from_command_line(argv)
    except ImproperlyConfigured as exc:
        # A setting, a folder or a disk the install needs: the sentence says which and
        # what to do; a traceback through Django's start-up says nothing more to an operator.
        sys.exit(f"Avatars cannot start: {exc}")
    except DatabaseError as exc:
        if not isinstance(exc, OperationalError) and type(exc) is not DatabaseError:
            raise  # a constraint, a query: a fault of the code, with its traceback
        # A database its disk refuses mid-command (full, read-only, failing): 62 lines of
        # traceback from check_originals and api_token on a full disk (a review).
        sys.exit(
            f"Avatars could not use its database: {str(exc).rstrip('.')}. If its disk is full "
            "or read-only, free space on it or let it be written, then run this again."
        )


if __name__ == "__main__":
    main()
