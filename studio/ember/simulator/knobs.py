"""Hold the behaviour knobs that /_sim/config reads and merges: job time, latency, failures."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from studio.ember.simulator.wire import JSON, ApiError

LATENCY_ROUTES = ("submit", "poll", "fetch", "release", "history", "generate")


@dataclass
class Busy:
    """Describe a burst of refused submits (429/503 with Retry-After)."""

    count: int = 0
    status: int = 429
    retry_after: float = 1.0


@dataclass
class SimConfig:
    """Hold the knobs that /_sim/config reads and merges."""

    job_seconds: float = 2.0
    latency: dict[str, float] = field(default_factory=lambda: dict.fromkeys(LATENCY_ROUTES, 0.0))
    drop_after_accept: int = 0
    fail_history_writes: bool = False
    non_image_bytes: bool = False
    busy: Busy = field(default_factory=Busy)
    slow_download_seconds: float = 0.0
    fail_jobs: int = 0

    def as_json(self) -> JSON:
        """Return a JSON-ready copy."""
        return dataclasses.asdict(self)


def _bad_config(message: str) -> ApiError:
    """Build a 400 for a bad /_sim/config body."""
    return ApiError(400, "invalid_config", message)


def _as_seconds(name: str, value: Any) -> float:
    """Accept a finite number >= 0 (bools are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _bad_config(f"{name} must be a number of seconds.")
    if not math.isfinite(value) or value < 0:
        raise _bad_config(f"{name} must be a finite number >= 0.")
    return float(value)


def _as_count(name: str, value: Any) -> int:
    """Accept an integer >= 0."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _bad_config(f"{name} must be an integer >= 0.")
    return value


def _as_bool(name: str, value: Any) -> bool:
    """Accept a JSON boolean only."""
    if not isinstance(value, bool):
        raise _bad_config(f"{name} must be true or false.")
    return value


def _merge_latency(current: dict[str, float], name: str, value: Any) -> dict[str, float]:
    """Merge per-route latencies into the current map."""
    if not isinstance(value, dict):
        raise _bad_config(f"{name} must be an object of route -> seconds.")
    unknown = sorted(set(value) - set(LATENCY_ROUTES))
    if unknown:
        raise _bad_config(f"Unknown latency routes {unknown}; use {list(LATENCY_ROUTES)}.")
    merged = dict(current)
    merged.update({k: _as_seconds(f"{name}.{k}", v) for k, v in value.items()})
    return merged


def _merge_busy(current: Busy, name: str, value: Any) -> Busy:
    """Merge count/status/retry_after into the current burst."""
    if not isinstance(value, dict):
        raise _bad_config(f"{name} must be an object with count, status, retry_after.")
    unknown = sorted(set(value) - {"count", "status", "retry_after"})
    if unknown:
        raise _bad_config(f"Unknown busy keys {unknown}.")
    busy = dataclasses.replace(current)
    if "count" in value:
        busy.count = _as_count(f"{name}.count", value["count"])
    if "status" in value:
        if value["status"] not in (429, 503) or isinstance(value["status"], bool):
            raise _bad_config(f"{name}.status must be 429 or 503.")
        busy.status = int(value["status"])
    if "retry_after" in value:
        busy.retry_after = _as_seconds(f"{name}.retry_after", value["retry_after"])
    return busy


_CONFIG_PARSERS: dict[str, Callable[[Any, str, Any], Any]] = {
    "job_seconds": lambda _cur, name, value: _as_seconds(name, value),
    "latency": _merge_latency,
    "drop_after_accept": lambda _cur, name, value: _as_count(name, value),
    "fail_history_writes": lambda _cur, name, value: _as_bool(name, value),
    "non_image_bytes": lambda _cur, name, value: _as_bool(name, value),
    "busy": _merge_busy,
    "slow_download_seconds": lambda _cur, name, value: _as_seconds(name, value),
    "fail_jobs": lambda _cur, name, value: _as_count(name, value),
}


def merged_config(config: SimConfig, patch: JSON) -> SimConfig:
    """Return a copy of config with patch applied; validate every key before changing any."""
    unknown = sorted(set(patch) - set(_CONFIG_PARSERS))
    if unknown:
        raise _bad_config(f"Unknown config keys {unknown}; known: {sorted(_CONFIG_PARSERS)}.")
    new = dataclasses.replace(
        config, latency=dict(config.latency), busy=dataclasses.replace(config.busy)
    )
    for key, value in patch.items():
        setattr(new, key, _CONFIG_PARSERS[key](getattr(config, key), key, value))
    return new
