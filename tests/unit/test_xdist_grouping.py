"""``make test``'s two workers keep a module's tests together (tests/conftest.py): the grouping takes effect.

pytest-xdist's ``--dist loadgroup`` sends tests by a group suffix it adds to each node id; a pytest that keeps
node ids elsewhere (9.2 with xdist 3.8) silently drops the suffix, and modules, module fixtures and the
host-network modules are then spread over both workers.
"""

from __future__ import annotations

import os

import pytest


def test_this_module_runs_as_one_group_on_the_workers(request: pytest.FixtureRequest) -> None:
    under_loadgroup = getattr(request.config.option, "loadgroup", False)
    if os.environ.get("PYTEST_XDIST_WORKER") is None or not under_loadgroup:
        pytest.skip("only under pytest-xdist's --dist loadgroup (make test)")
    assert request.node.nodeid.endswith("@tests.unit.test_xdist_grouping"), request.node.nodeid
