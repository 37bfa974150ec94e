"""The suite's own layout: builders in factories.py, fixtures in conftest.py, processes in e2e/.

A builder imported from a conftest ties the importer to pytest's plugin loading (and to
a module pytest imports under another name); a stack built by hand migrates again and
stops its simulator its own way. These tests keep the layout from drifting back.
"""

import ast
from pathlib import Path

TESTS = Path(__file__).parent
E2E = TESTS / "e2e"
STACK_BUILDERS = {TESTS / "processes.py", E2E / "conftest.py"}


def python_files() -> list[Path]:
    """Every Python file of the suite but this one (which names what it looks for)."""
    return sorted(path for path in TESTS.rglob("*.py") if path != Path(__file__))


def test_it_imports_builders_from_factories_and_never_from_a_conftest():
    importers = [
        str(path.relative_to(TESTS))
        for path in python_files()
        if "tests.conftest" in path.read_text() or "from conftest" in path.read_text()
    ]

    assert importers == []


def test_it_keeps_only_fixtures_and_hooks_in_the_conftest():
    tree = ast.parse((TESTS / "conftest.py").read_text())
    plain = [
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef)
        and not node.name.startswith("pytest_")
        and not any("fixture" in ast.unparse(d) for d in node.decorator_list)
    ]
    assigned = [
        target.id
        for node in tree.body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
        and (target.id == "__all__" or not target.id.startswith("_"))
    ]

    assert (plain, assigned) == ([], [])


def test_it_starts_processes_only_from_the_e2e_folder():
    outside = [
        str(path.relative_to(TESTS))
        for path in python_files()
        if E2E not in path.parents and "pytest.mark.e2e" in path.read_text()
    ]

    assert outside == []


def test_it_builds_every_stack_through_the_shared_fixtures():
    by_hand = [
        str(path.relative_to(TESTS))
        for path in python_files()
        if path not in STACK_BUILDERS and "migrated_template(" in path.read_text()
    ]

    assert by_hand == []


def test_no_test_module_imports_another():
    # Shared helpers live in modules of their own (factories, studio_pages, admin_pages, ...):
    # a test module imported by another runs its tests' module code twice and ties the two.
    importers = []
    for path in python_files():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                last = node.module.rsplit(".", 1)[-1]
                if node.module.startswith("tests") and last.startswith("test_"):
                    importers.append(f"{path.relative_to(TESTS)} imports {node.module}")
    assert importers == []


def test_no_test_module_is_over_five_hundred_lines():
    long = [
        f"{path.relative_to(TESTS)}: {len(path.read_text().splitlines())} lines"
        for path in python_files()
        if len(path.read_text().splitlines()) > 500
    ]
    assert long == []
