"""The browser finder's decisions: what `make test` uses, installs or reports on a fresh machine."""

from dataclasses import dataclass, field

import pytest

from tests import browsers


@dataclass
class Machine:
    """A pretend machine: which programs exist, who we are, what an install brings."""

    on_path: dict[str, str] = field(default_factory=dict)
    files: set[str] = field(default_factory=set)
    root: bool = False
    apt_brings: str | None = None  # the path apt-get install chromium would create
    playwright_brings: str | None = None  # the path `playwright install chromium` would create
    ran: list[list[str]] = field(default_factory=list)

    def system(self) -> browsers.System:
        return browsers.System(
            which=self.on_path.get,
            is_file=lambda path: path in self.files,
            is_root=lambda: self.root,
            run=self._run,
            playwright_path=lambda: self.playwright_brings,
        )

    def _run(self, argv: list[str]) -> bool:
        self.ran.append(argv)
        if "apt-get" in argv and "install" in argv and self.apt_brings:
            self.files.add(self.apt_brings)
            return True
        if argv[-2:] == ["install", "chromium"] and "playwright" in argv and self.playwright_brings:
            self.files.add(self.playwright_brings)
            return True
        return "update" in argv


def test_it_uses_a_chromium_on_path_and_installs_nothing():
    machine = Machine(on_path={"chromium": "/opt/bin/chromium", "apt-get": "/usr/bin/apt-get"})

    found = browsers.ensure(machine.system())

    assert found.path == "/opt/bin/chromium"
    assert machine.ran == []


def test_it_uses_debians_path_when_path_lacks_it():
    machine = Machine(files={"/usr/bin/chromium"})

    assert browsers.ensure(machine.system()).path == "/usr/bin/chromium"
    assert machine.ran == []


def test_it_installs_debians_package_as_root():
    machine = Machine(
        on_path={"apt-get": "/usr/bin/apt-get"}, root=True, apt_brings="/usr/bin/chromium"
    )

    found = browsers.ensure(machine.system())

    assert found.path == "/usr/bin/chromium"
    assert "apt-get" in found.how
    assert any("install" in argv and "chromium" in argv for argv in machine.ran), machine.ran


def test_it_falls_back_to_playwrights_own_chromium_when_not_root():
    machine = Machine(
        on_path={"apt-get": "/usr/bin/apt-get"},
        root=False,
        playwright_brings="/home/me/.cache/ms-playwright/chromium/chrome",
    )

    found = browsers.ensure(machine.system())

    assert found.path == "/home/me/.cache/ms-playwright/chromium/chrome"
    assert not any("apt-get" in argv for argv in machine.ran), machine.ran


def test_it_tries_playwright_when_apt_cannot_install():
    machine = Machine(on_path={"apt-get": "/usr/bin/apt-get"}, root=True, playwright_brings="/pw")

    found = browsers.ensure(machine.system())

    assert found.path == "/pw"
    assert [argv[-3:] for argv in machine.ran][-1] == ["playwright", "install", "chromium"]


def test_it_says_the_fix_when_nothing_can_be_had():
    machine = Machine(root=True)

    found = browsers.ensure(machine.system())

    assert found.path is None
    assert browsers.FIX in found.how


def test_find_never_installs():
    machine = Machine(on_path={"apt-get": "/usr/bin/apt-get"}, root=True, apt_brings="/x")

    assert browsers.find(machine.system()).path is None
    assert machine.ran == []


def test_the_report_is_the_last_line_of_make_test(tmp_path, monkeypatch, capsys):
    report = tmp_path / "skips"
    report.write_text("6")
    monkeypatch.setenv(browsers.SKIP_REPORT_ENV, str(report))

    assert browsers.main(["report"]) == 0

    out = capsys.readouterr().out.strip().splitlines()
    assert out == [browsers.skipped_line(6)]
    assert out[0].startswith("6 browser tests did not run") and browsers.FIX in out[0]
    assert not report.exists()


@pytest.mark.parametrize("content", ["0", ""])
def test_the_report_says_nothing_when_every_browser_test_ran(
    tmp_path, monkeypatch, capsys, content
):
    report = tmp_path / "skips"
    report.write_text(content)
    monkeypatch.setenv(browsers.SKIP_REPORT_ENV, str(report))

    browsers.main(["report"])

    assert capsys.readouterr().out == ""
