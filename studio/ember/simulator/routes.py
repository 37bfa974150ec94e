"""Route requests to the state: the Ember routes behind the bearer token, and /_sim controls."""

from __future__ import annotations

import math
import re
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass

from studio.ember.simulator.jobs import parse_job_spec
from studio.ember.simulator.state import SimulatorState
from studio.ember.simulator.wire import (
    JSON,
    ApiError,
    Request,
    Response,
    error_response,
    invalid,
    json_response,
    required_str,
)

RouteHandler = Callable[[SimulatorState, Request, re.Match[str]], Response]


@dataclass(frozen=True)
class Route:
    """Bind a method and path pattern to a handler; name picks the latency knob."""

    method: str
    pattern: re.Pattern[str]
    name: str
    handler: RouteHandler


def _submit(state: SimulatorState, request: Request, match: re.Match[str]) -> Response:
    """Accept a job: busy burst first, then validation, idempotency, charge, maybe a drop."""
    busy = state.take_busy()
    if busy is not None:
        retry = {"Retry-After": str(math.ceil(busy.retry_after))}
        code = "rate_limited" if busy.status == 429 else "unavailable"
        return error_response(busy.status, code, "Ember is busy (simulated); retry later.", retry)
    spec = parse_job_spec(request.json())
    key = (request.header("Idempotency-Key") or "").strip() or None
    if spec.kind == "clip" and key is None:
        raise ApiError(400, "missing_idempotency_key", "A clip submit needs an Idempotency-Key.")
    body, replayed, drop = state.submit(spec, key)
    headers = {"Idempotent-Replayed": "true"} if replayed else {}
    return json_response(202, body, headers, drop=drop)


def _poll(state: SimulatorState, request: Request, match: re.Match[str]) -> Response:
    return json_response(200, state.poll(match["job_id"]))


def _fetch(state: SimulatorState, request: Request, match: re.Match[str]) -> Response:
    data, mime, delay = state.image_file(match["image_id"])
    return Response(200, data, content_type=mime, body_delay=delay)


def _release(state: SimulatorState, request: Request, match: re.Match[str]) -> Response:
    """Take the durable-copy acknowledgement and unprotect the image."""
    payload = request.json()
    if payload.get("protected") is not False or not isinstance(
        payload.get("durable_copy", True), bool
    ):
        raise invalid('The body must be {"protected": false, "durable_copy": true}.')
    return json_response(200, state.release(match["image_id"]))


def _history(state: SimulatorState, request: Request, match: re.Match[str]) -> Response:
    source_app = request.param("source_app")
    if not source_app:
        raise invalid("The source_app query parameter is required.")
    return json_response(200, state.history(source_app, request.param("task_id")))


def _generate(state: SimulatorState, request: Request, match: re.Match[str]) -> Response:
    return json_response(201, state.generate(parse_job_spec(request.json())))


def _sim_get_config(state: SimulatorState, request: Request, match: re.Match[str]) -> Response:
    return json_response(200, state.config_json())


def _sim_set_config(state: SimulatorState, request: Request, match: re.Match[str]) -> Response:
    return json_response(200, state.update_config(request.json()))


def _sim_repair(state: SimulatorState, request: Request, match: re.Match[str]) -> Response:
    """Write missing history rows, for one task when the body names it."""
    task_id = request.json_or_empty().get("task_id")
    if task_id is not None and not isinstance(task_id, str):
        raise invalid("task_id must be a string.")
    return json_response(200, {"repaired": state.repair_history(task_id)})


def _sim_cleanup(state: SimulatorState, request: Request, match: re.Match[str]) -> Response:
    """Run the retention pass for the app named in the body."""
    source_app = required_str(request.json(), "source_app")
    return json_response(200, {"removed": state.cleanup(source_app)})


def _sim_reset(state: SimulatorState, request: Request, match: re.Match[str]) -> Response:
    state.reset()
    return json_response(200, {"reset": True})


def _lister(method: Callable[[SimulatorState], JSON]) -> RouteHandler:
    """Wrap a state listing method as a GET handler."""
    return lambda state, request, match: json_response(200, method(state))


def _route(method: str, pattern: str, name: str, handler: RouteHandler) -> Route:
    """Build a Route from a path regex."""
    return Route(method, re.compile(pattern), name, handler)


_API_ROUTES = (
    _route("POST", r"/api/v1/api-generators/jobs", "submit", _submit),
    _route("GET", r"/api/v1/api-generators/jobs/(?P<job_id>[^/]+)", "poll", _poll),
    _route("GET", r"/api/v1/images/(?P<image_id>[^/]+)/file", "fetch", _fetch),
    _route("PATCH", r"/api/v1/explorations/(?P<image_id>[^/]+)/protection", "release", _release),
    _route("GET", r"/api/v1/history", "history", _history),
    _route("POST", r"/api/v1/api-generators/generate", "generate", _generate),
)
_SIM_ROUTES = (
    _route("GET", r"/_sim/config", "", _sim_get_config),
    _route("POST", r"/_sim/config", "", _sim_set_config),
    _route("POST", r"/_sim/history/repair", "", _sim_repair),
    _route("POST", r"/_sim/cleanup", "", _sim_cleanup),
    _route("POST", r"/_sim/reset", "", _sim_reset),
    _route("GET", r"/_sim/jobs", "", _lister(SimulatorState.jobs_json)),
    _route("GET", r"/_sim/images", "", _lister(SimulatorState.images_json)),
    _route("GET", r"/_sim/charges", "", _lister(SimulatorState.charges_json)),
    _route("GET", r"/_sim/requests", "", _lister(SimulatorState.requests_json)),
)


def _find_route(routes: tuple[Route, ...], request: Request) -> tuple[Route, re.Match[str]]:
    """Pick the route for a request, or raise 404 (no such path) / 405 (wrong method)."""
    allowed = []
    for route in routes:
        match = route.pattern.fullmatch(request.path)
        if match is None:
            continue
        if route.method == request.method:
            return route, match
        allowed.append(route.method)
    if allowed:
        message = f"{request.method} is not allowed on {request.path}."
        raise ApiError(405, "method_not_allowed", message, {"Allow": ", ".join(sorted(allowed))})
    raise ApiError(404, "not_found", f"No route for {request.path}.")


def _run(routes: tuple[Route, ...], state: SimulatorState, request: Request) -> Response:
    """Route and run a request, turning every failure into the contract's error shape."""
    try:
        route, match = _find_route(routes, request)
        delay = state.latency(route.name) if route.name else 0.0
        if delay > 0:
            time.sleep(delay)
        return route.handler(state, request, match)
    except ApiError as exc:
        return exc.response()
    except Exception:
        # A simulator bug must still answer JSON, never a traceback; the trace goes to stderr.
        traceback.print_exc(file=sys.stderr)
        return error_response(500, "internal", "The simulator hit an unexpected error.")


def dispatch(state: SimulatorState, request: Request) -> Response:
    """Answer one request: /_sim controls directly, Ember routes behind auth and logged."""
    if request.path == "/_sim" or request.path.startswith("/_sim/"):
        return _run(_SIM_ROUTES, state, request)
    entry = state.log_request(request)
    if state.authorized(request.header("Authorization")):
        response = _run(_API_ROUTES, state, request)
    else:
        response = error_response(401, "unauthorized", "Missing or wrong bearer token.")
    state.set_logged_status(entry, None if response.drop else response.status)
    return response
