"""Set a run's figures beside the last full run's, and say when the machine was another.

A figure that moved between two runs moved with the code or with the machine: a run on
a machine whose disk commits at a third of the speed measures that disk as much as the
change. So the comparison names both runs' processors when they differ.
"""

import json
import math
from pathlib import Path
from typing import Any

from bench.common import Result


def last_full(results_dir: Path) -> Path | None:
    """Return the newest full run kept under `results_dir` (names sort by date), if any."""
    runs = sorted(results_dir.glob("*-full.json"))
    return runs[-1] if runs else None


def processor(machine: str) -> str:
    """Return the cores and CPU model of a machine line (`bench.common.machine`)."""
    return machine.split(";", 1)[0].strip()


def comparison(results: list[Result], earlier: Path, *, machine: str) -> str:
    """Return lines setting each row measured now beside the same row in `earlier`."""
    try:
        record: dict[str, Any] = json.loads(earlier.read_text())
        then = {str(row["stage"]): row for row in record["rows"]}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"The last full run ({earlier.name}) could not be read to compare with: {exc!r}"
    lines = [f"Against the last full run ({earlier.name}, commit {str(record.get('commit'))[:7]}):"]
    before, now = processor(str(record.get("machine", "?"))), processor(machine)
    if before != now:
        lines.append(
            f"  on another machine (then {before}; now {now}): "
            "the figures compare the machines as much as the code"
        )
    matched = 0
    for result in results:
        row = then.get(result.stage)
        if row is None:
            continue
        matched += 1
        old = _earlier_result(row)
        lines.append(
            f"  {result.goal}: {result.measured_text} now ({_verdict(result)}), "
            f"{old.measured_text} then ({_verdict(old)})"
        )
    if not matched:
        lines.append("  none of this run's rows was measured then")
    return "\n".join(lines)


def _earlier_result(row: dict[str, Any]) -> Result:
    measured = row.get("measured")
    return Result(
        goal=str(row.get("goal", "")),
        measured=float(measured) if isinstance(measured, int | float) else math.nan,
        unit=str(row.get("unit", "x")),
        target=str(row.get("target", "")),
        passed=bool(row.get("passed")),
        raw=str(row.get("raw", "")),
    )


def _verdict(result: Result) -> str:
    return "PASS" if result.passed else "FAIL"
