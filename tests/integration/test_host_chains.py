"""A killed process's iptables chain is removed by the next session; a live process's chain is kept.

Real iptables in the host's namespace (root). The chains hold one rule that matches nothing used here
(TCP to port 1) and are removed at the end whatever happens.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from testbed.host_chains import (
    chain_name,
    create_chain,
    host_chains,
    remove_chain,
    remove_stale_chains,
    stale,
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("iptables") is None, reason="iptables in the host's namespace: root"
    ),
]
RULE = ["-p", "tcp", "-d", "127.0.0.1", "--dport", "1", "-j", "DROP"]


def _jumps_to(chain: str) -> int:
    cmd = ["iptables", "-w", "-S", "OUTPUT"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return sum(1 for line in out.splitlines() if line.split()[-2:] == ["-j", chain])


def test_the_chain_of_an_ended_process_goes_with_its_jump_and_a_live_ones_stays():
    cmd = [sys.executable, "-c", "import os; print(os.getpid())"]
    ended = subprocess.run(cmd, capture_output=True, text=True, check=True)
    dead_pid = int(ended.stdout)
    dead, live = chain_name("test-dead", pid=dead_pid), chain_name("test-live")
    try:
        create_chain(dead, [RULE])
        create_chain(live, [RULE])
        assert {dead, live} <= set(host_chains())
        assert _jumps_to(dead) == 1 and _jumps_to(live) == 1
        assert stale(dead) and not stale(live)

        removed = remove_stale_chains()

        assert dead in removed and live not in removed
        assert dead not in host_chains() and _jumps_to(dead) == 0
        assert live in host_chains() and _jumps_to(live) == 1
    finally:
        remove_chain(dead)
        remove_chain(live)
    assert live not in host_chains() and _jumps_to(live) == 0


def test_chain_names_fit_iptables_and_name_their_owner():
    assert chain_name("soak", pid=4_194_304) == "KA-4194304-soak"
    assert stale("KAFKA_AUDIT_SOAK")  # an earlier version's chain, named for no process
    assert not stale("DOCKER-USER") and not stale(chain_name("x"))
    with pytest.raises(ValueError, match="28 characters"):
        chain_name("a-tag-far-too-long-for-iptables")
    with pytest.raises(ValueError, match="A-Za-z0-9"):
        chain_name("no spaces")
