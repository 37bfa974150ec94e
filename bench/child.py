"""Run one benchmark's operations in a Django process of its own: `python -m bench.child MODULE`.

Reads one command per line on stdin (`{"op": name, "args": {...}}`), calls
`MODULE.op_<name>(**args)` and answers one JSON line (`{"ok": result}` or
`{"error": traceback}`) on the original stdout. Anything else the process prints
(logs, warnings) goes to stderr, which the parent sends to a log file.
"""

import importlib
import json
import os
import sys
import traceback

import django


def main() -> None:
    protocol = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    # Whatever is printed from here on lands in the log, never in the protocol.
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    django.setup()
    module = importlib.import_module(sys.argv[1])
    for line in sys.stdin:
        command = json.loads(line)
        try:
            answer = {"ok": getattr(module, f"op_{command['op']}")(**command["args"])}
        except Exception:
            answer = {"error": traceback.format_exc()}
        protocol.write(json.dumps(answer, default=str) + "\n")


if __name__ == "__main__":
    main()
