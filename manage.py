#!/usr/bin/env python
"""Django's command-line utility for Avatars."""

import os
import sys


def main() -> None:
    from avatars.early import note_sigterm

    note_sigterm(sys.argv)  # before Django's start-up, which a stop must not crash
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "avatars.settings")
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        execute_from_command_line(sys.argv)
    except ImproperlyConfigured as exc:
        # A setting, a folder or a disk the install needs: the sentence says which and
        # what to do; a traceback through Django's start-up says nothing more to an operator.
        sys.exit(f"Avatars cannot start: {exc}")


if __name__ == "__main__":
    main()
