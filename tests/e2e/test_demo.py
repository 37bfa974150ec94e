"""`make demo`'s command, run for real: three processes on loopback, a printed login, Ctrl-C."""

import os
import re
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest

from tests.processes import ROOT, Stack, free_port


def start_demo(data_dir, web_port: int, ember_port: int) -> tuple[subprocess.Popen[str], dict]:
    env = {**os.environ, "AVATARS_DATA_DIR": str(data_dir), "PYTHONUNBUFFERED": "1"}
    env.pop("DATABASE_URL", None)
    proc = subprocess.Popen(
        [
            sys.executable,
            "manage.py",
            "demo",
            "--port",
            str(web_port),
            "--ember-port",
            str(ember_port),
            "--job-seconds",
            "0.2",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    printed: dict[str, str] = {}
    for line in proc.stdout:
        match = re.match(r"\s+(studio|login|password):\s+(\S+)", line)
        if match:
            printed[match[1]] = match[2]
        if "password" in printed:
            break
    assert set(printed) == {"studio", "login", "password"}, printed
    return proc, printed


def wait_until(check, timeout: float = 90.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = check()
        except httpx.TransportError:
            value = None
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError("the demo did not get there in time")


def sign_in(base: str, username: str, password: str) -> bool:
    with httpx.Client(base_url=base, follow_redirects=False, timeout=10) as http:
        http.get("/admin/login/")
        response = http.post(
            "/admin/login/?next=/admin/",
            data={
                "username": username,
                "password": password,
                "csrfmiddlewaretoken": http.cookies["csrftoken"],
            },
            headers={"Referer": f"{base}admin/login/"},
        )
        return response.status_code == 302 and response.headers["location"] == "/admin/"


def stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGINT)  # Ctrl-C
    out, _ = proc.communicate(timeout=90)
    return out


STATES = (
    "from studio.models import Batch, Subject, Task\n"
    "result = [Batch.objects.count(), Subject.objects.count(),"
    " sorted(set(Task.objects.values_list('state', flat=True)))]"
)


def test_the_demo_runs_everything_prints_a_login_and_stops_on_ctrl_c(tmp_path):
    data_dir = tmp_path / "demo"
    web, ember = free_port(), free_port()
    stack = Stack.__new__(Stack)
    stack.env = {**os.environ, "AVATARS_DATA_DIR": str(data_dir)}
    stack.env.pop("DATABASE_URL", None)  # the demo runs on SQLite, as docs/operations.md says
    proc, printed = start_demo(data_dir, web, ember)
    try:
        base = printed["studio"]
        assert base == f"http://127.0.0.1:{web}/"
        assert wait_until(lambda: sign_in(base, printed["login"], printed["password"]))
        # The worker drives the sample batch through the simulator: 3 providers x 2 frames.
        charges = wait_until(
            lambda: (
                (t := httpx.get(f"http://127.0.0.1:{ember}/_sim/charges").json())["total"] == 6
                and t
            )
        )
        assert set(charges["charges"].values()) == {1}
        # ... and on to `done`: each image copied into the archive (a stop in between would
        # leave a task `copying`, for the next worker to finish).
        assert wait_until(lambda: stack.django(STATES) == [1, 2, ["done"]])
    finally:
        out = stop(proc)
    assert proc.returncode == 0, out
    assert "Avatars demo stopped." in out

    # Twice in a row: a new random password, no duplicate seed, no second sample batch.
    proc, again = start_demo(data_dir, web, ember)
    try:
        assert again["password"] != printed["password"]
        assert wait_until(lambda: sign_in(again["studio"], again["login"], again["password"]))
    finally:
        out = stop(proc)
    assert proc.returncode == 0, out
    assert stack.django(STATES) == [1, 2, ["done"]]


def test_it_stops_everything_and_says_which_process_died_when_one_exits(tmp_path):
    """Ember's port is taken: the simulator cannot listen, so the whole demo stops and fails."""
    env = {**os.environ, "AVATARS_DATA_DIR": str(tmp_path / "demo"), "PYTHONUNBUFFERED": "1"}
    env.pop("DATABASE_URL", None)
    web = free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        ember = str(taken.getsockname()[1])
        done = subprocess.run(
            [sys.executable, "manage.py", "demo", "--port", str(web), "--ember-port", ember],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    assert done.returncode != 0
    assert "The ember simulator exited with code 1." in done.stderr, done.stderr
    assert "Avatars demo stopped." not in done.stdout
    with pytest.raises(httpx.TransportError):  # the studio it had started is gone too
        httpx.get(f"http://127.0.0.1:{web}/", timeout=2)
