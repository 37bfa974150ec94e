"""A benchmark run is set beside the last full run kept, naming the machines when they differ."""

import json
from pathlib import Path

from bench.common import Result
from bench.compare import comparison, last_full

INTEL = "2 cores (nproc), Intel Xeon; /tmp on /dev/vda (ext4, 252 GB); Python 3.11.7, SQLite 3.40.1"
AMD = "2 cores (nproc), AMD EPYC; /tmp on /dev/vda (ext4, 271 GB); Python 3.11.7, SQLite 3.40.1"


def _kept(path: Path, *, machine: str, rows: list[dict[str, object]]) -> Path:
    record = {"date": "2026-12-01T06:51:35+00:00", "commit": "1d9d316aa", "machine": machine}
    path.write_text(json.dumps({**record, "rows": rows}))
    return path


def _row(stage: str, goal: str, measured: float | None, passed: bool) -> dict[str, object]:
    return {
        "stage": stage,
        "goal": goal,
        "measured": measured,
        "unit": "x",
        "target": "≥ 0.75x",
        "passed": passed,
        "raw": "",
        "notes": [],
    }


def _now(stage: str, goal: str, measured: float) -> Result:
    return Result(goal, measured, "x", "≥ 0.75x", measured >= 0.75, "", stage=stage)


def test_each_row_is_set_beside_the_same_row_of_the_last_full_run(tmp_path: Path) -> None:
    earlier = _kept(
        tmp_path / "20261201T065135Z-full.json",
        machine=INTEL,
        rows=[
            _row("throughput", "engine vs bare Ember client", 0.76, True),
            _row("slots", "throughput with 4, 16, 64 slots", 0.68, False),
        ],
    )
    now = [
        _now("slots", "throughput with 4, 16, 64 slots", 0.56),
        _now("upload", "reference upload", 1.14),  # not measured then: left out
    ]

    printed = comparison(now, earlier, machine=INTEL + " (a bigger disk makes no difference)")

    assert printed.splitlines() == [
        "Against the last full run (20261201T065135Z-full.json, commit 1d9d316):",
        "  throughput with 4, 16, 64 slots: 0.56x now (FAIL), 0.68x then (FAIL)",
    ]


def test_a_run_on_another_processor_says_so_with_both(tmp_path: Path) -> None:
    rows = [_row("throughput", "engine vs bare Ember client", 0.76, True)]
    earlier = _kept(tmp_path / "20261201T065135Z-full.json", machine=INTEL, rows=rows)

    printed = comparison(
        [_now("throughput", "engine vs bare Ember client", 0.53)], earlier, machine=AMD
    )

    assert printed.splitlines()[1:] == [
        "  on another machine (then 2 cores (nproc), Intel Xeon; now 2 cores (nproc), AMD EPYC): "
        "the figures compare the machines as much as the code",
        "  engine vs bare Ember client: 0.53x now (FAIL), 0.76x then (PASS)",
    ]


def test_a_row_that_broke_then_reads_as_no_figure(tmp_path: Path) -> None:
    rows = [_row("pages", "pages vs history (worst page)", None, False)]
    earlier = _kept(tmp_path / "20261201T065135Z-full.json", machine=AMD, rows=rows)

    printed = comparison(
        [_now("pages", "pages vs history (worst page)", 1.13)], earlier, machine=AMD
    )

    assert (
        printed.splitlines()[-1]
        == "  pages vs history (worst page): 1.13x now (PASS), n/a then (FAIL)"
    )


def test_the_newest_full_run_is_the_one_compared_with(tmp_path: Path) -> None:
    assert last_full(tmp_path) is None
    for name in (
        "20261130T165416Z-full.json",
        "20261201T065135Z-full.json",
        "20261201T090000Z-quick.json",
        "20261201T100000Z-partial.json",
    ):
        (tmp_path / name).write_text("{}")

    assert last_full(tmp_path) == tmp_path / "20261201T065135Z-full.json"


def test_an_unreadable_run_is_named_and_the_comparison_goes_no_further(tmp_path: Path) -> None:
    earlier = tmp_path / "20261201T065135Z-full.json"
    for text in ("{not json", json.dumps({"rows": [{"goal": "no stage"}]}), json.dumps([1])):
        earlier.write_text(text)

        printed = comparison([_now("slots", "slots", 0.5)], earlier, machine=AMD)

        assert printed.startswith(
            "The last full run (20261201T065135Z-full.json) could not be read to compare with: "
        ), printed
