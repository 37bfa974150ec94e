"""Run the benchmarks and print one table, one row per goal (`make bench`, `python -m bench.run`).

    python -m bench.run            # full sizes (several minutes)
    python -m bench.run --quick    # reduced sizes, for a quick check
    python -m bench.run --only pump,pages

Every stage runs in child processes with their own temporary data dir; this
process only orchestrates and never opens a database. The exit status is 1
when a goal fails.
"""

import argparse
import importlib
import math
import os
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

# Django is set up here only so the stage modules can be imported (they hold the code
# their children run); this process never connects to the database it names.
_PARENT_DATA = Path(tempfile.mkdtemp(prefix="avatars-bench-"))
os.environ["AVATARS_DATA_DIR"] = str(_PARENT_DATA / "parent")
os.environ.pop("DATABASE_URL", None)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "avatars.settings")

import django  # noqa: E402

django.setup()

from bench.common import Context, Result, machine  # noqa: E402

# One module per goal, in the order of the table; each has `run(ctx) -> Result`.
STAGES = ("pump", "throughput", "planning", "pages", "leak", "latency")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="reduced sizes for a quick run")
    parser.add_argument(
        "--only", default="", help=f"comma-separated stages to run ({', '.join(STAGES)})"
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary data dirs")
    args = parser.parse_args(argv)
    chosen = [s.strip() for s in args.only.split(",") if s.strip()] or list(STAGES)
    unknown = [s for s in chosen if s not in STAGES]
    if unknown:
        parser.error(f"unknown stage(s) {unknown}; choose from {list(STAGES)}")

    ctx = Context(tmp=_PARENT_DATA, quick=args.quick)
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
    print(report(results, quick=args.quick, seconds=time.monotonic() - began))
    return 0 if all(r.passed for r in results) else 1


def run_stage(name: str, ctx: Context) -> Result:
    """Run one stage; a stage that breaks is a failed row with its reason, not a lost table."""
    try:
        return importlib.import_module(f"bench.{name}").run(ctx)
    except Exception as exc:
        ctx.log(f"{name} broke:\n{traceback.format_exc()}")
        reason = " ".join(str(exc).split())[:300]
        return Result(name, math.nan, "x", "-", False, f"the stage broke: {reason}")


def report(results: list[Result], *, quick: bool, seconds: float) -> str:
    """Return the table (Markdown, so it can go into the README as printed) and the notes."""
    lines = [
        f"Avatars benchmarks ({'quick' if quick else 'full'} run, {seconds:.0f} s)",
        f"Machine: {machine(Path(tempfile.gettempdir()))}",
        "",
        "| goal | measured | target | result | raw figures |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        verdict = "PASS" if r.passed else "**FAIL**"
        lines.append(f"| {r.goal} | {r.measured_text} | {r.target} | {verdict} | {r.raw} |")
    for r in results:
        if r.notes:
            lines += ["", f"{r.goal}:", *(f"  {note}" for note in r.notes)]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
