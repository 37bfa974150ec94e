"""The house's figures for the code itself: small modules, short functions (docs/design.md §2).

Migrations are generated and left out; the tests have their own check (test_suite_layout).
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("avatars", "studio", "bench")
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 50


def modules() -> list[Path]:
    return sorted(
        path
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if "migrations" not in path.parts
    )


def test_no_module_is_over_five_hundred_lines():
    long = [
        f"{path.relative_to(ROOT)}: {n} lines"
        for path in modules()
        if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    ]
    assert long == []


@pytest.mark.parametrize("package", PACKAGES)
def test_no_function_is_over_fifty_lines(package):
    long = []
    for path in modules():
        if path.relative_to(ROOT).parts[0] != package:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                size = (node.end_lineno or node.lineno) - node.lineno + 1
                if size > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {size} lines")
    assert long == []
