"""The test suite.

The shared helpers below check what they read with `assert`; pytest rewrites those
asserts as it does a test module's, so a failing check reports the values it compared.
"""

import pytest

pytest.register_assert_rewrite(
    "tests.api.calls",
    "tests.ember_client.calls",
    "tests.machine_parts",
    "tests.property_machine",
    "tests.simulator.calls",
    "tests.worker_drive",
)
