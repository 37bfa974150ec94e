"""Run the benchmarks and print one table, one row per goal (`make bench`, `python -m bench.run`).

    python -m bench.run            # full sizes (several minutes)
    python -m bench.run --quick    # reduced sizes, for a quick check
    python -m bench.run --only pump,pages

Every stage runs in child processes with their own temporary data dir; this
process only orchestrates and never opens a database. The exit status is 1
when a goal fails.
"""

import argparse
import datetime
import importlib
import json
import math
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

# Django is set up here only so the stage modules can be imported (they hold the code
# their children run); this process never connects to the database it names.
_PARENT_DATA = Path(tempfile.mkdtemp(prefix="avatars-bench-"))
os.environ["AVATARS_DATA_DIR"] = str(_PARENT_DATA / "parent")
# A DATABASE_URL (make bench-postgres) is for the stages that name it, never for this process.
POSTGRES = os.environ.pop("DATABASE_URL", "")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "avatars.settings")
# Production settings refuse to load without a real secret; this process signs nothing.
os.environ.setdefault("DJANGO_SECRET_KEY", f"bench-parent-{secrets.token_hex(32)}")

import django  # noqa: E402

django.setup()

from bench.common import Context, Result, machine, report, run_kind  # noqa: E402
from bench.compare import comparison, last_full  # noqa: E402

# One module per goal, in the table's order; each has `run(ctx) -> Result`.
STAGES = (
    "pump",
    "throughput",
    "planning",
    "pages",
    "leak",
    "latency",
    "loaded",
    "slots",
    "upload",
    "memory",
)
RESULTS = Path(__file__).resolve().parent / "results"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="reduced sizes for a quick run")
    parser.add_argument(
        "--only", default="", help=f"comma-separated stages to run ({', '.join(STAGES)})"
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary data dirs")
    args = parser.parse_args(argv)
    stages = (*STAGES, "loaded_postgres") if POSTGRES else STAGES
    chosen = [s.strip() for s in args.only.split(",") if s.strip()] or list(stages)
    unknown = [s for s in chosen if s not in stages]
    if unknown:
        parser.error(f"unknown stage(s) {unknown}; choose from {list(stages)}")

    ctx = Context(tmp=_PARENT_DATA, quick=args.quick, database_url=POSTGRES)
    began = time.monotonic()
    results = []
    try:
        for name in chosen:
            started = time.monotonic()
            results.append(run_stage(name, ctx))
            ctx.log(f"{name}: {time.monotonic() - started:.0f} s")
    finally:
        if args.keep:
            ctx.log(f"data kept in {ctx.tmp}")
        else:
            shutil.rmtree(ctx.tmp, ignore_errors=True)
    seconds = time.monotonic() - began
    kind = run_kind(quick=args.quick, ran={r.stage for r in results}, stages=STAGES)
    print(report(results, kind=kind, seconds=seconds))
    earlier = last_full(RESULTS)  # before this run is saved, which may be a full one
    saved = save(results, kind=kind, seconds=seconds)
    ctx.log(f"figures written to {saved}")
    if earlier is not None:
        print("\n" + comparison(results, earlier, machine=machine(Path(tempfile.gettempdir()))))
    return 0 if all(r.passed for r in results) else 1


def run_stage(name: str, ctx: Context) -> Result:
    """Run one stage; a stage that breaks is a failed row with its reason, not a lost table."""
    try:
        result: Result = importlib.import_module(f"bench.{name}").run(ctx)
    except Exception as exc:
        ctx.log(f"{name} broke:\n{traceback.format_exc()}")
        reason = " ".join(str(exc).split())[:300]
        result = Result(name, math.nan, "x", "-", False, f"the stage broke: {reason}")
    result.stage = name
    return result


def save(results: list[Result], *, kind: str, seconds: float) -> Path:
    """Write the run as JSON under bench/results/, so the next change has figures to compare."""
    now = datetime.datetime.now(datetime.UTC)
    record = {
        "date": now.isoformat(timespec="seconds"),
        "commit": _commit(),
        "quick": kind == "quick",
        "seconds": round(seconds, 1),
        "machine": machine(Path(tempfile.gettempdir())),
        "rows": [
            {
                "stage": r.stage,
                "goal": r.goal,
                "measured": None if math.isnan(r.measured) else r.measured,
                "unit": r.unit,
                "target": r.target,
                "passed": r.passed,
                "raw": r.raw,
                "notes": r.notes,
            }
            for r in results
        ],
    }
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{now:%Y%m%dT%H%M%SZ}-{kind}.json"
    path.write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n")
    return path


def _commit() -> str:
    """Return the checkout's commit (with "+dirty" when files differ from it), or "unknown"."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=RESULTS.parent,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
            cwd=RESULTS.parent,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{head}+dirty" if dirty else head


if __name__ == "__main__":
    sys.exit(main())
