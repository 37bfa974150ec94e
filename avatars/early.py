"""A SIGTERM in a command's own start-up, noted rather than the end of the process.

Python's default for SIGTERM ends a process with -15, which a service manager logs as a
crash. The worker, `backup` and `restore` each put a handler of their own in place once
they run, but Django's start-up comes first (its imports, the settings, the apps: half a
second or so), and a stop then ended them with -15 (a review's kills). `manage.py` calls
`note_sigterm` before it imports Django: a SIGTERM from then on is noted here, and the
command, once it runs, stops at once with its sentence, as it would have later.
"""

import signal
from collections.abc import Sequence

NOTED: list[int] = []  # the SIGTERMs that came before the command's own handler
STOPPABLE = frozenset({"run_worker", "backup", "restore"})


def note_sigterm(argv: Sequence[str]) -> None:
    """Note, from now until a command puts its own handler in place, any SIGTERM."""
    if len(argv) > 1 and argv[1] in STOPPABLE:
        signal.signal(signal.SIGTERM, lambda signum, _frame: NOTED.append(signum))
