"""`make demo`'s command, run for real: three processes on loopback, a printed login, Ctrl-C."""

import fcntl
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.processes import ROOT, Stack, free_port


def demo_env(data_dir) -> dict[str, str]:
    env = {**os.environ, "AVATARS_DATA_DIR": str(data_dir), "PYTHONUNBUFFERED": "1"}
    env.pop("DATABASE_URL", None)  # the demo runs on SQLite, as docs/operations.md says
    return env


def start_demo(
    data_dir, web_port: int, ember_port: int, *, make: bool = False
) -> tuple[subprocess.Popen[str], dict]:
    """Start `manage.py demo` (through `make demo`, with `make`) and read what it prints."""
    args = ["--port", str(web_port), "--ember-port", str(ember_port), "--job-seconds", "0.2"]
    if make:
        argv = ["make", "-s", "--no-print-directory", "demo", f"ARGS={' '.join(args)}"]
    else:
        argv = [sys.executable, "manage.py", "demo", *args]
    env = demo_env(data_dir)
    proc = subprocess.Popen(
        argv,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    printed: dict[str, str] = {}
    for line in proc.stdout:
        match = re.match(r"\s+(studio|login|password|data):\s+(.+)", line)
        if match:
            printed[match[1]] = match[2].strip()
        if "data" in printed:  # the last line it prints about itself
            break
    assert set(printed) == {"studio", "login", "password", "data"}, printed
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


RENAME = "result = Subject.objects.filter(name='Ada').update(name='Ada Lovelace')"
NAMES = (
    "from studio.models import Subject\n"
    "result = sorted(Subject.objects.values_list('name', flat=True))"
)
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
        # A wrong address meets the studio's own page, as deployed (a review's showed Django's
        # debug page, listing the URL patterns, 980 px wide on a phone).
        missing = httpx.get(f"{base}no-such-page/")
        assert missing.status_code == 404
        assert "There is nothing at this address" in missing.text, missing.text[:300]
        # ... styled and live: with DEBUG off the static files are served collected (a
        # review's first demo had none, every page bare and without its scripts).
        for name, kind in (("studio.css", "text/css"), ("pictures.js", "text/javascript")):
            served = httpx.get(f"{base}static/studio/{name}")
            assert served.status_code == 200, (name, served.status_code)
            assert served.headers["content-type"].startswith(kind), served.headers
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

    # Twice in a row: a new random password, no duplicate seed (Ada renamed is not made
    # again: a review's), no second sample batch; it says the data was kept, and where.
    stack.django("from studio.models import Subject\n" + RENAME)
    proc, again = start_demo(data_dir, web, ember)
    try:
        assert again["password"] != printed["password"]
        assert wait_until(lambda: sign_in(again["studio"], again["login"], again["password"]))
        assert not sign_in(again["studio"], printed["login"], printed["password"])
    finally:
        out = stop(proc)
    assert proc.returncode == 0, out
    assert printed["data"] == str(data_dir)
    assert again["data"].startswith(f"{data_dir} (kept from an earlier run;"), again
    assert stack.django(STATES) == [1, 2, ["done"]]
    assert stack.django(NAMES) == ["Ada Lovelace", "Bo"]


def children_of(pid: int) -> dict[str, int]:
    """The demo's children, by the command each runs."""
    found = {}
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        argv = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
        command = next((a.decode() for a in argv if a.decode() in COMMANDS), None)
        if command is not None:  # none: one killed, not yet reaped (its argv is gone)
            found[command] = int(child)
    return found


COMMANDS = ("ember_simulator", "avatars.asgi:application", "run_worker")


def test_it_starts_the_worker_and_the_simulator_again_and_stops_all_when_the_studio_dies(
    tmp_path,
):
    """Found by a review: the worker stopped to see what the page says took the studio and
    the simulator down with it, and the only way back (a new demo) printed a new password
    and signed every tab out. The worker and the simulator are started again, as a service
    manager would; the studio's death still stops the demo, saying which died."""
    data_dir = tmp_path / "demo"
    web, ember = free_port(), free_port()
    proc, printed = start_demo(data_dir, web, ember)
    try:
        assert wait_until(lambda: listening(web) and listening(ember))
        first = wait_until(lambda: len(found := children_of(proc.pid)) == 3 and found)
        for killed in ("run_worker", "ember_simulator"):
            os.kill(first[killed], signal.SIGKILL)
            again = wait_until(
                lambda k=killed: children_of(proc.pid).get(k) not in (None, first[k]),
                timeout=30,
            )
            assert again, f"{killed} was not started again"
            assert listening(web), "the studio went on meanwhile"
        assert wait_until(lambda: listening(ember), timeout=30)
        assert sign_in(f"http://127.0.0.1:{web}/", printed["login"], printed["password"])
        os.kill(children_of(proc.pid)["avatars.asgi:application"], signal.SIGKILL)
        out, _ = proc.communicate(timeout=90)
    finally:
        proc.kill()
    assert "The worker was killed (SIGKILL). The rest of the demo goes on; it starts again" in out
    assert "The ember simulator was killed (SIGKILL)." in out, out
    assert out.count("started again.") == 2, out
    assert proc.returncode != 0
    assert "The studio was killed (SIGKILL); the demo stopped the others too" in out, out
    assert "Avatars demo stopped." not in out
    assert not listening(web) and not listening(ember), "the others were stopped too"


def test_a_second_demo_changes_nothing_of_the_one_running_and_says_why(tmp_path):
    """Found by a review: a second `make demo` set a new password, then failed on its ports;
    the first demo's printed login no longer worked."""
    data_dir = tmp_path / "demo"
    web, ember = free_port(), free_port()
    proc, printed = start_demo(data_dir, web, ember)
    try:
        assert wait_until(lambda: sign_in(printed["studio"], printed["login"], printed["password"]))
        same_ports = ["--port", str(web), "--ember-port", str(ember)]
        other_ports = ["--port", str(free_port()), "--ember-port", str(free_port())]
        refusals = {}
        for name, ports in (("ports", same_ports), ("worker", other_ports)):
            refusals[name] = subprocess.run(
                [sys.executable, "manage.py", "demo", *ports],
                cwd=ROOT,
                env=demo_env(data_dir),
                capture_output=True,
                text=True,
                timeout=60,
            )
        assert sign_in(printed["studio"], printed["login"], printed["password"]), (
            "the first demo's login stopped working"
        )
    finally:
        stop(proc)
    taken, owned = refusals["ports"], refusals["worker"]
    assert taken.returncode != 0 and owned.returncode != 0
    assert f"Port {web} on 127.0.0.1 is taken" in taken.stderr, taken.stderr
    assert 'make demo ARGS="--port 8001 --ember-port 8766"' in taken.stderr
    assert "Another Avatars worker already owns this database" in owned.stderr, owned.stderr
    for refused in (taken, owned):
        assert "Nothing was changed." in refused.stderr
        assert "password" not in refused.stdout and "Traceback" not in refused.stderr


GONE_BOUND = 15.0  # seconds for all three to be gone once their starter is


def listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def worker_lock_free(data_dir) -> bool:
    with open(data_dir / "worker.lock", "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True


def demo_pid(parent: int) -> int:
    """The pid of `parent`'s one child (the demo command under make: no shell between)."""
    children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
    assert len(children) == 1, children
    return int(children[0])


@pytest.mark.parametrize("killed", ["its starter (make)", "the demo command"])
def test_nothing_is_left_running_when_the_demo_or_its_starter_is_killed_outright(tmp_path, killed):
    """Found by a review: a harness that SIGKILLed `make demo` left the studio, the worker
    and the simulator running, holding their ports and the worker's lock."""
    data_dir = tmp_path / "demo"
    web, ember = free_port(), free_port()
    starter, _printed = start_demo(data_dir, web, ember, make=True)  # the real make
    try:
        assert starter.stdout is not None
        for line in starter.stdout:  # the children print to the same pipe
            if "Avatars worker running" in line:
                break
        assert wait_until(lambda: listening(web) and listening(ember))
        assert not worker_lock_free(data_dir), "the worker should hold its lock"
        victim = starter.pid if killed.startswith("its starter") else demo_pid(starter.pid)
        os.kill(victim, signal.SIGKILL)
        gone = time.monotonic()
        while listening(web) or listening(ember) or not worker_lock_free(data_dir):
            took = time.monotonic() - gone
            assert took < GONE_BOUND, (
                f"{took:.1f} s after {killed} was killed: studio listening {listening(web)}, "
                f"simulator listening {listening(ember)}, "
                f"worker lock free {worker_lock_free(data_dir)}"
            )
            time.sleep(0.2)
    finally:
        starter.kill()
        starter.communicate(timeout=60)
