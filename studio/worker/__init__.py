"""The worker (docs/design.md §6): one owner, recovery, the pump, one coroutine per task.

Each task advances one durable state at a time: the state naming a step is
committed before that step is acted on, so a process killed at any line leaves
a row that says how far it got.

- loop.py: `Worker`, its lock, the pump, stopping, the database back-off.
- steps.py: the steps of one task (submit, follow, finish, copy), mixed into `Worker`.
- transitions.py: what the steps write, the wake-up table, the heartbeat, the payload.
"""

from studio.phrases import REFERENCE_CHANGED
from studio.worker.loop import Worker
from studio.worker.transitions import MAY_HAVE_REACHED, RECONCILE_PHASE, build_payload, db

__all__ = [
    "MAY_HAVE_REACHED",
    "RECONCILE_PHASE",
    "REFERENCE_CHANGED",
    "Worker",
    "build_payload",
    "db",
]
