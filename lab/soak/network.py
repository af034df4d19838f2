"""Cut one local broker off the network with iptables, and undo it.

Every process here talks over loopback, so a port rule alone cannot isolate a broker: its own outgoing
connections (fetching as a follower, heartbeating to the KRaft controller) leave from ephemeral ports.
So the cut is three kinds of rules in the soak's own chain ``KA-<pid>-soak`` (jumped to from ``OUTPUT``;
every loopback packet passes ``OUTPUT``; named for its process, :mod:`testbed.host_chains`):

* ``-m cgroup --path kafka-audit-soak-cut -j DROP``: what the broker sends on sockets it opens during
  the cut (it is moved into that cgroup v2 group first; a socket keeps the cgroup it was created in,
  so this rule alone misses the connections it already has),
* ``-p tcp --sport P -j DROP`` and ``--dport P`` for every local port of the broker's TCP sockets
  when the cut starts (:func:`socket_ports`: its listeners and its own outgoing connections to the
  other brokers' fetch and controller ports), and
* the same for its broker and controller ports: everything sent to it.

Undoing deletes exactly those: the jump, the chain's rules, the chain, the cgroup (the process is moved
back first). Global chains are never flushed. A soak killed during a cut cannot undo it: the next soak (and
the next test session) removes the chain of a process that has ended. ``tc netem`` does not exist on this
kernel.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from testbed.host_chains import HostChainError, chain_name, create_chain, remove_chain, remove_stale_chains

from kafka_plumbing.errors import KafkaAuditError

CHAIN_TAG = "soak"
CGROUP_ROOT = Path("/sys/fs/cgroup/unified")
CGROUP = "kafka-audit-soak-cut"


class NetworkCutError(KafkaAuditError):
    """iptables or the cgroup could not be set up (not root, no cgroup v2, no iptables)."""


def _cgroup_root() -> Path:
    """Return the cgroup v2 mount: ``/sys/fs/cgroup/unified`` (hybrid hierarchy) or ``/sys/fs/cgroup``."""
    if (CGROUP_ROOT / "cgroup.procs").exists():
        return CGROUP_ROOT
    return Path("/sys/fs/cgroup")


def socket_ports(pid: int) -> set[int]:
    """Return the local TCP ports of every socket process ``pid`` holds (listening or connected).

    Sockets are the ``socket:[inode]`` links in ``/proc/<pid>/fd``; their ports come from
    ``/proc/<pid>/net/tcp`` and ``tcp6`` (hex ``address:port`` in column 2, inode in column 10; proc(5)).
    """
    inodes: set[str] = set()
    fd_dir = Path(f"/proc/{pid}/fd")
    for fd in fd_dir.iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports: set[int] = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if len(cols) > 9 and cols[9] in inodes:
                ports.add(int(cols[1].rsplit(":", 1)[1], 16))
    return ports


class BrokerCut:
    """One cut: ``with BrokerCut(pid, [ports]):`` the broker is isolated inside the block.

    Args:
        pid: The broker's JVM.
        ports: Its broker and controller ports on 127.0.0.1.
    """

    def __init__(self, pid: int, ports: list[int]) -> None:
        self.pid = pid
        self.ports = ports
        self.cut_ports: list[int] = []
        self.chain = chain_name(CHAIN_TAG)
        self.active = False

    def __enter__(self) -> BrokerCut:
        self.apply()
        return self

    def __exit__(self, *exc: object) -> None:
        self.undo()

    def apply(self) -> None:
        """Move the broker into the cut cgroup and install the rules.

        Raises:
            NetworkCutError: a step failed (whatever was done is undone first).
        """
        try:
            group = _cgroup_root() / CGROUP
            group.mkdir(exist_ok=True)
            (group / "cgroup.procs").write_text(str(self.pid))
            self.active = True
            self.cut_ports = sorted(set(self.ports) | socket_ports(self.pid))
            rules = [["-m", "cgroup", "--path", CGROUP, "-j", "DROP"]]
            for port in self.cut_ports:
                rules += [["-p", "tcp", side, str(port), "-j", "DROP"] for side in ("--dport", "--sport")]
            create_chain(self.chain, rules)
        except (OSError, HostChainError) as exc:
            self.undo()
            raise NetworkCutError(f"cutting off PID {self.pid}: {exc}") from exc

    def undo(self) -> None:
        """Delete the jump, the chain's rules and the chain; move the process back; remove the cgroup.

        Idempotent and never raises for what is already gone (it runs in ``finally`` blocks).
        """
        remove_chain(self.chain)
        group = _cgroup_root() / CGROUP
        root_procs = _cgroup_root() / "cgroup.procs"
        try:
            for pid in (group / "cgroup.procs").read_text().split():
                with contextlib.suppress(OSError):  # exited meanwhile
                    root_procs.write_text(pid)
            group.rmdir()
        except OSError:
            pass
        self.active = False


def clean_up_leftovers() -> None:
    """Undo a cut a killed soak left behind (its chain and cgroup), and this process's own.

    Called before a soak starts and when it stops.
    """
    remove_stale_chains()
    BrokerCut(0, []).undo()
