"""iptables chains in the host's network namespace, named for the process that owns them.

Tests and soaks cut connections on loopback with rules in chains of their own, jumped to from ``OUTPUT``
(every loopback packet passes it). Their owner removes them when it ends; a killed owner (SIGKILL, a CI
job stopped at its deadline) cannot, and its rules stay in force for every later program on the host. A
soak killed during a broker cut once left a chain dropping 12 ports (``--dport``/``--sport``); on the
next runs any connection that drew one of them as its ephemeral or listening port stalled 30 s in
CONNECT, and tests that never cut anything failed at random (broker connects, Alertmanager POSTs).

So every such chain is named ``KA-<pid>-<tag>`` (:func:`chain_name`), and :func:`remove_stale_chains`
removes the chains whose process is gone: the test session and the soak call it when they start.
Global chains are never flushed; only a chain's own rules and the jumps to it are deleted.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Sequence

from kafka_plumbing.errors import KafkaAuditError
from kafka_plumbing.processes import pid_alive

PREFIX = "KA"
MAX_CHAIN_NAME = 28
"""iptables' limit on a chain's name (``XT_EXTENSION_MAXNAMELEN`` 29, with the terminating NUL)."""
_OWNED = re.compile(r"KA(?:16|-CUT)?-(\d+)-[A-Za-z0-9._-]+")
"""Chains named by :func:`chain_name`, and ``KA16-`` or ``KA-CUT-<pid>-<port>`` (the tests' earlier names)."""
_UNOWNED = frozenset({"KAFKA_AUDIT_SOAK"})
"""Chains of earlier versions that carry no owner: always stale (nothing creates them any more)."""
BUILT_IN = ("INPUT", "OUTPUT", "FORWARD")


class HostChainError(KafkaAuditError):
    """An iptables command failed (not root, no iptables, a rule the kernel refused)."""


def _iptables(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["iptables", "-w", *args], capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise HostChainError(f"iptables {' '.join(args)}: {result.stderr.strip()}")
    return result


def chain_name(tag: str, pid: int | None = None) -> str:
    """Name this process's (or ``pid``'s) chain for ``tag``: ``KA-<pid>-<tag>``.

    Raises:
        ValueError: the name would exceed iptables' 28 characters, or ``tag`` holds other characters
            than letters, digits, ``.``, ``_`` and ``-``.
    """
    name = f"{PREFIX}-{os.getpid() if pid is None else pid}-{tag}"
    if len(name) > MAX_CHAIN_NAME or not _OWNED.fullmatch(name):
        raise ValueError(f"chain name {name!r}: at most {MAX_CHAIN_NAME} characters of [A-Za-z0-9._-]")
    return name


def create_chain(name: str, rules: Sequence[Sequence[str]], jump_from: str = "OUTPUT") -> None:
    """Create chain ``name`` with ``rules``, jumped to first thing in ``jump_from``.

    Each rule is the arguments after ``-A name``. On a failure whatever was created is removed again.

    Raises:
        HostChainError: an iptables command failed.
    """
    _iptables("-N", name)
    try:
        for rule in rules:
            _iptables("-A", name, *rule)
        _iptables("-I", jump_from, "-j", name)
    except HostChainError:
        remove_chain(name)
        raise


def remove_chain(name: str) -> None:
    """Delete every jump to chain ``name`` from the built-in chains, its rules and the chain itself.

    Idempotent, and never raises for what is already gone (it runs in ``finally`` blocks).
    """
    for built_in in BUILT_IN:
        while _iptables("-D", built_in, "-j", name, check=False).returncode == 0:
            pass
    _iptables("-F", name, check=False)
    _iptables("-X", name, check=False)


def host_chains() -> list[str]:
    """Return the user-defined chains of the filter table (``iptables -S``'s ``-N`` lines).

    Raises:
        HostChainError: iptables failed (not root, or not installed).
    """
    out = _iptables("-S").stdout
    return [line.split()[1] for line in out.splitlines() if line.startswith("-N ")]


def stale(name: str) -> bool:
    """Whether chain ``name`` is one of ours whose owning process has ended."""
    if name in _UNOWNED:
        return True
    m = _OWNED.fullmatch(name)
    return bool(m) and not pid_alive(int(m.group(1)))


def remove_stale_chains() -> list[str]:
    """Remove the chains (and the jumps to them) whose owner has ended; return their names.

    Does nothing, and returns ``[]``, where it cannot: not root, or no ``iptables``.
    """
    if os.geteuid() != 0 or shutil.which("iptables") is None:
        return []
    try:
        names = [n for n in host_chains() if stale(n)]
    except HostChainError:
        return []
    for name in names:
        remove_chain(name)
    return names
