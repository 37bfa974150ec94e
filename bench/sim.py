"""Serve the real Ember simulator until stdin closes: `python -m bench.sim [--durations FILE]`.

Prints the simulator's URL as its first line. With `--durations`, a JSON file
mapping task ids to seconds, each task's job takes its own time (the latency
stage spreads jobs over the poll cycle that way); other jobs take
`--job-seconds`. The simulator imports nothing from Django, so this process has
no data dir at all.
"""

import argparse
import json
import sys
from pathlib import Path

from studio.ember.simulator import Job, JobSpec, Simulator


class TimedSimulator(Simulator):
    """The real simulator, giving each listed task's job the duration chosen for it."""

    def __init__(self, *, job_seconds: float, durations: dict[str, float]) -> None:
        super().__init__(port=0, job_seconds=job_seconds)
        state = self.state
        create = state._new_job

        def new_job(spec: JobSpec, key: str | None, via: str, will_fail: bool) -> Job:
            # Runs under the state's lock; the job captures its duration at submit.
            task_id = str(spec.source_metadata["task_id"])
            state.config.job_seconds = durations.get(task_id, job_seconds)
            return create(spec, key, via, will_fail)

        state._new_job = new_job  # type: ignore[method-assign]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--job-seconds", type=float, default=0.0)
    parser.add_argument("--durations", type=Path, default=None)
    args = parser.parse_args()
    durations = json.loads(args.durations.read_text()) if args.durations else {}
    simulator = TimedSimulator(job_seconds=args.job_seconds, durations=durations).start()
    print(simulator.url, flush=True)
    try:
        sys.stdin.read()  # the parent closes our stdin to stop us
    finally:
        simulator.stop()


if __name__ == "__main__":
    main()
