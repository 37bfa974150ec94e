"""The web server's protocol settings (avatars/heads.py): read loudly, and the connection
cap kept under the file descriptors the listen backlog leaves."""

import subprocess
import sys

import pytest

from avatars import heads


@pytest.mark.parametrize(
    ("name", "value", "said"),
    [
        ("AVATARS_HEAD_SECONDS", "10s", "AVATARS_HEAD_SECONDS must be a number, not '10s'"),
        ("AVATARS_HEAD_SECONDS", "nan", "AVATARS_HEAD_SECONDS must be a finite number"),
        ("AVATARS_HEAD_SECONDS", "0", "AVATARS_HEAD_SECONDS must be at least 0.1, not 0.0"),
        ("AVATARS_MAX_CONNECTIONS", "1k", "AVATARS_MAX_CONNECTIONS must be an integer"),
        ("AVATARS_SEND_STALL_SECONDS", "-5", "must be at least 1.0, not -5.0"),
    ],
)
def test_a_value_it_cannot_use_stops_the_server_with_a_sentence(name, value, said):
    """Found by a re-review: "0" closed every request unlogged, "nan" never timed a head out,
    and "10s" was a traceback through uvicorn's import."""
    started = subprocess.run(
        [sys.executable, "-c", "import avatars.heads"],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", name: value},
        timeout=60,
    )

    assert started.returncode == 1, started
    assert started.stderr.startswith("Avatars cannot start: "), started.stderr
    assert said in started.stderr, started.stderr
    assert "Traceback" not in started.stderr


@pytest.mark.parametrize(
    ("soft", "backlog", "cap"),
    [(1024, 128, 224), (20000, 128, 1000), (1024, 2048, 1), (4096, 2048, 512)],
)
def test_the_cap_leaves_room_for_the_backlog_and_the_processs_own_files(
    monkeypatch, soft, backlog, cap
):
    """Found by a re-review: asyncio accepts a backlog's worth before any is refused, so at
    1,024 descriptors a cap of a quarter still ran out of them (113 MB of log in 25 s)."""
    monkeypatch.setattr(heads.resource, "getrlimit", lambda _kind: (soft, soft))

    assert heads.connection_cap(backlog) == cap
    if backlog < soft:  # a backlog past the limit leaves nothing to keep: one connection
        assert cap + backlog <= soft, f"{cap} connections and {backlog} accepts past {soft} fds"
