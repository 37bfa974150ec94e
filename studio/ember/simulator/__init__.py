"""Serve a local stand-in for Ember that honours docs/ember.md.

The simulator answers the public Ember routes (submit, poll, fetch, release, history and the
synchronous door) plus ``/_sim/...`` controls for demos and tests: latency, fault injection,
history repair, the retention cleanup, and listings of jobs, images, charges and requests.

The package is cut by concern:

- ``wire``: requests, answers and error answers as plain values;
- ``knobs``: the behaviour knobs (job time, latency, refused and failed jobs, broken answers);
- ``jobs``: the validated submit body, the job and its stored image;
- ``state``: :class:`SimulatorState`, every job, image, history row, charge and logged request,
  guarded by a single ``threading.Lock``;
- ``ledger``: the optional state file, saved before each answer about a change;
- ``routes``: which handler answers which method and path, behind the bearer token;
- ``server``: the standard library's ``ThreadingHTTPServer`` speaking HTTP/1.1, and
  :class:`Simulator`, which runs it.

The portraits themselves are drawn by ``studio.drawing``. With ``state_file`` the jobs, images,
history, charges and releases are written there (``ledger``) before each answer that changed
them, and read back at start: the demo uses this, so a demo restarted, even after its processes
were killed, finds its jobs as the real Ember would; otherwise a restart forgets everything.
The package imports nothing from Django so it can run anywhere.

Usage::

    sim = Simulator(port=0, job_seconds=0).start()
    ...  # talk to sim.url over HTTP with "Authorization: Bearer dev-token"
    sim.stop()
"""

from studio.drawing import Picture, render_clip, render_png
from studio.ember.simulator.jobs import Job, JobSpec, StoredImage, parse_job_spec
from studio.ember.simulator.knobs import Busy, SimConfig, merged_config
from studio.ember.simulator.routes import dispatch
from studio.ember.simulator.server import Simulator
from studio.ember.simulator.state import SimulatorState
from studio.ember.simulator.wire import ApiError, Request, Response

__all__ = [
    "ApiError",
    "Busy",
    "Job",
    "JobSpec",
    "Picture",
    "Request",
    "Response",
    "SimConfig",
    "Simulator",
    "SimulatorState",
    "StoredImage",
    "dispatch",
    "merged_config",
    "parse_job_spec",
    "render_clip",
    "render_png",
]
