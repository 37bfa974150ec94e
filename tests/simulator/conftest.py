"""The Ember simulator tests' simulator, on a free loopback port, and a client of it."""

from collections.abc import Iterator

import httpx
import pytest

from studio.ember.simulator import Simulator


@pytest.fixture
def sim() -> Iterator[Simulator]:
    simulator = Simulator(port=0, job_seconds=0).start()
    yield simulator
    simulator.stop()


@pytest.fixture
def client(sim: Simulator) -> Iterator[httpx.Client]:
    """An authorised client; /_sim calls go through it too (they ignore the header)."""
    headers = {"Authorization": "Bearer dev-token"}
    with httpx.Client(base_url=sim.url, headers=headers, timeout=10) as http:
        yield http
