"""Which benchmark runs are kept to compare with: full runs of every stage only."""

from bench.common import Result, report, run_kind

STAGES = ("pump", "throughput", "slots")


def test_a_run_of_every_stage_at_full_size_is_full() -> None:
    assert run_kind(quick=False, ran=set(STAGES), stages=STAGES) == "full"
    # make bench-postgres adds a stage of its own
    assert run_kind(quick=False, ran={*STAGES, "loaded_postgres"}, stages=STAGES) == "full"


def test_a_run_of_some_stages_is_partial_and_a_quick_one_quick() -> None:
    assert run_kind(quick=False, ran={"throughput", "slots"}, stages=STAGES) == "partial"
    assert run_kind(quick=True, ran=set(STAGES), stages=STAGES) == "quick"


def test_the_printed_table_says_what_kind_of_run_it_was() -> None:
    row = Result("throughput with 4, 16, 64 slots", 0.9, "x", "each ≥ 90%", True, "figures")

    printed = report([row], kind="partial", seconds=28).splitlines()

    assert printed[0] == "Avatars benchmarks (partial run, 28 s)"
    assert "| throughput with 4, 16, 64 slots | 0.90x | each ≥ 90% | PASS | figures |" in printed
