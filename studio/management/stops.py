"""A command that a SIGTERM must not end with -15 once it runs (backup, restore).

Run as a process, a SIGTERM outside the command's own handler (before that handler is in
place, or while its last lines are said) is noted: the command stops at once before doing
anything, or says what it would have said. Once the command has ended, a SIGTERM is
ignored: Python's shutdown puts back the default action over a handler of its own, and
one landing in that teardown (a few tenths of a second) ended the process with -15 after
its last sentence (a review's strace), but it leaves an ignored signal ignored.
"""

import signal

from django.core.management.base import BaseCommand

from avatars import early
from studio import backups


class NotingSigterm(BaseCommand):
    noted = False  # a SIGTERM came while the command's own handler was not in place

    def run_from_argv(self, argv: list[str]) -> None:
        signal.signal(signal.SIGTERM, self._note)
        # During Django's start-up, before this ran: read after, so that none falls between.
        self.noted = self.noted or bool(early.NOTED)
        try:
            super().run_from_argv(argv)
        finally:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the process ends now

    def _note(self, _signum: int, _frame: object) -> None:
        self.noted = True

    def stop_if_noted(self) -> None:
        """Stop, as the command's own handler would, if a SIGTERM was noted before it ran."""
        if self.noted:
            raise backups.Terminated()
