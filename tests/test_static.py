"""The studio's stylesheet and scripts as shipped: whole, so a bad merge cannot hide a section."""

from pathlib import Path

import pytest

STATIC = Path(__file__).resolve().parent.parent / "studio" / "static" / "studio"


@pytest.mark.parametrize("name", sorted(p.name for p in STATIC.glob("*.css")))
def test_every_rule_block_of_the_stylesheet_is_closed_before_the_next_section(name):
    depth = 0
    for number, line in enumerate((STATIC / name).read_text().splitlines(), start=1):
        if line.startswith("/* ---"):  # a section header stands at the top level
            assert depth == 0, f"{name}:{number}: a block is still open where a section starts"
        depth += line.count("{") - line.count("}")
        assert depth >= 0, f"{name}:{number}: a brace closes nothing"
    assert depth == 0, f"{name}: {depth} block(s) never closed"
