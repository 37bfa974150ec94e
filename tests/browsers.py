"""Find (or get) a Chromium for the browser tests, so `make test` works on a fresh machine.

The decisions, in order:
1. a chromium already on PATH, or at Debian's usual path;
2. as root with apt-get: Debian's `chromium` package;
3. Playwright's own `playwright install chromium`;
4. none: the browser tests are skipped with one reason, and `make test` ends by saying how
   many did not run and the one command that fixes it (in CI a missing browser is an error).

`python -m tests.browsers ensure` runs the steps that install (the Makefile calls it before
pytest); the tests only ever `find()`, which installs nothing.
"""

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

DEBIAN_PATH = "/usr/bin/chromium"
NAMES = ("chromium", "chromium-browser")
FIX = "sudo apt-get install chromium  (or: .venv/bin/playwright install chromium)"
# Where the Makefile asks pytest to leave the number of browser tests that did not run.
SKIP_REPORT_ENV = "AVATARS_BROWSER_SKIP_REPORT"
INSTALL_TIMEOUT = 900  # seconds for one package install


@dataclass(frozen=True)
class System:
    """The few things the finder asks of the machine, replaceable in tests."""

    which: Callable[[str], str | None] = shutil.which
    is_file: Callable[[str], bool] = os.path.isfile
    is_root: Callable[[], bool] = lambda: hasattr(os, "geteuid") and os.geteuid() == 0
    run: Callable[[list[str]], bool] = lambda argv: _run(argv)
    playwright_path: Callable[[], str | None] = lambda: _playwright_chromium()


@dataclass(frozen=True)
class Finding:
    path: str | None
    how: str  # what was found or done, for people


def find(system: System = System()) -> Finding:
    """Return a Chromium already on this machine, installing nothing."""
    for name in NAMES:
        path = system.which(name)
        if path:
            return Finding(path, f"{name} on PATH")
    if system.is_file(DEBIAN_PATH):
        return Finding(DEBIAN_PATH, "Debian's chromium")
    path = system.playwright_path()
    if path and system.is_file(path):
        return Finding(path, "Playwright's own chromium")
    return Finding(None, f"no chromium found; fix: {FIX}")


def ensure(system: System = System()) -> Finding:
    """Return a Chromium, installing one through apt (as root) or Playwright when missing."""
    found = find(system)
    if found.path:
        return found
    if system.is_root() and system.which("apt-get"):
        env_prefix = ["env", "DEBIAN_FRONTEND=noninteractive"]
        if system.run(["apt-get", "update", "-qq"]) and system.run(
            [*env_prefix, "apt-get", "install", "-y", "-qq", "chromium"]
        ):
            found = find(system)
            if found.path:
                return Finding(found.path, "installed Debian's chromium with apt-get")
    if system.run([sys.executable, "-m", "playwright", "install", "chromium"]):
        found = find(system)
        if found.path:
            return Finding(found.path, "installed Playwright's chromium")
    return Finding(None, f"no chromium could be found or installed; fix: {FIX}")


def skipped_line(count: int) -> str:
    """Say how many browser tests did not run and the one command that fixes it."""
    return f"{count} browser tests did not run: no chromium on this machine. Fix: {FIX}"


def _run(argv: list[str]) -> bool:
    try:
        done = subprocess.run(argv, timeout=INSTALL_TIMEOUT, check=False, capture_output=True)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _playwright_chromium() -> str | None:
    """Return where Playwright keeps its own chromium (it may not be downloaded)."""
    try:
        from playwright.sync_api import sync_playwright

        with sync_playwright() as playwright:
            return str(playwright.chromium.executable_path)
    except Exception:
        return None


def main(argv: list[str]) -> int:
    command = argv[0] if argv else "ensure"
    if command == "ensure":
        found = ensure()
        print(f"browser tests: {found.how}" + (f" ({found.path})" if found.path else ""))
        return 0
    if command == "report":
        # After pytest: the last line of `make test` says what did not run, if anything.
        report = Path(os.environ.get(SKIP_REPORT_ENV, ""))
        if report.is_file():
            count = int(report.read_text() or 0)
            report.unlink()
            if count:
                print(skipped_line(count))
        return 0
    print(f"usage: python -m tests.browsers [ensure|report], not {command!r}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
