"""A network namespace for the producer, joined to the brokers' namespace by a veth pair, with impairment.

Topology (one per lab; every namespace is created by the tool)::

    producer ns kaudit-<pid>-<n>-p        router ns kaudit-<pid>-<n>-r              root ns (brokers, audit
    kap..  10.213.X.2/30  <-- veth -->  krp.. 10.213.X.1/30                         consumer, Spark, verifier)
                                        krh.. 10.214.X.1/30  <-- veth -->  kah.. 10.214.X.2/30
                                        FORWARD -i krp.. -> chain KAUDIT:
                                          -m statistic --mode random -j DROP   (Bernoulli loss)
                                          or -j NFQUEUE --queue-num 0          (delay, Gilbert-Elliott)
                                        POSTROUTING -o krh.. -j MASQUERADE

Only the producer's packets towards the brokers are impaired, as NetEm on the producer's interface did in
the paper's testbed (Sec. V). The impairment sits in a router namespace rather than on the producer's own
egress because a packet crossing a veth into another namespace is detached from its socket (NetEm does
the same, ``skb_orphan``): held in the producer's own stack, queued packets would count against TCP
Small Queues and throttle the producer to a few packets per delay period, which NetEm never does.
The brokers listen on the root end's address (KafkaCluster ``broker_host``). The producer's namespace
runs TCP CUBIC (:data:`DEFAULT_CONGESTION_CONTROL`), whatever the host's default, because the sender's
congestion control decides how much random loss costs.
:meth:`ProducerNamespace.close` (also on Ctrl-C) and :func:`cleanup_stale` (namespaces whose owner
died) delete the namespaces, which removes the veth pairs, the iptables rules and the queue with them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from kafka_plumbing.errors import KafkaAuditError
from kafka_plumbing.processes import pid_alive
from testbed.impairment import BernoulliLoss, Impairment

PREFIX = "kaudit-"
CHAIN = "KAUDIT"
QUEUE = 0
DEFAULT_CONGESTION_CONTROL = "cubic"
"""TCP congestion control of the producer's namespace: Linux's default, which the paper's Docker testbed
ran. A host may default to ``bbr`` (this machine does); BBR does not take random loss as a congestion
signal, so it keeps its rate through 20 % Bernoulli loss and hides the loss effects the paper measures."""

_SYSCTL = Path("/proc/sys/net/ipv4")


class NetworkError(KafkaAuditError):
    """The testbed network could not be set up, changed or removed; the message says why."""


def require_root(what: str = "the testbed network") -> None:
    """Refuse clearly when not root.

    Raises:
        NetworkError: if the effective user is not root.
    """
    if os.geteuid() != 0:
        raise NetworkError(
            f"{what} needs root: it creates network namespaces, veth pairs and iptables rules "
            "(run as root, e.g. with sudo)"
        )


def _run(cmd: Sequence[str], stdin: str | None = None) -> str:
    proc = subprocess.run(list(cmd), input=stdin, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise NetworkError(f"`{' '.join(cmd)}` failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def list_namespaces() -> list[str]:
    """Names of the testbed's network namespaces (``kaudit-<pid>-<n>-p|r``) that exist now."""
    out = _run(["ip", "netns", "list"])
    return [line.split()[0] for line in out.splitlines() if line.startswith(PREFIX)]


def cleanup_stale() -> list[str]:
    """Delete testbed namespaces whose owning process has died; return their names."""
    removed = []
    for ns in list_namespaces():
        m = re.fullmatch(rf"{PREFIX}(\d+)-\d+-[pr]", ns)
        if m and not pid_alive(int(m.group(1))):
            with contextlib.suppress(NetworkError):
                _run(["ip", "netns", "delete", ns])
                removed.append(ns)
    return removed


_OPEN_STATES = {"ESTAB", "SYN-SENT", "SYN-RECV", "CLOSE-WAIT"}
_CLOSING_STATES = {"FIN-WAIT-1", "CLOSING", "LAST-ACK"}


def carries_data(side: str, state: str, recv_q: int, send_q: int) -> bool:
    """Whether one TCP socket (as ``ss -tn`` shows it) may still deliver messages to a broker.

    Args:
        side: ``producer`` (a socket in the producer's namespace) or ``broker`` (a broker's socket).
        state: ``ss`` state name (ESTAB, FIN-WAIT-1, ...).
        recv_q: Bytes received and not read by the application (Recv-Q).
        send_q: Bytes not acknowledged by the peer yet (Send-Q; a pending FIN counts as 1).

    A producer-side socket that is open can send more; one closing (FIN-WAIT-1, CLOSING, LAST-ACK) still
    holds data while more than its FIN is unacknowledged. FIN-WAIT-2 and TIME-WAIT hold none. A broker
    socket holds data until Kafka has read its receive queue; an idle one whose producer end is gone (its
    RST or FIN lost to the impairment) stays ESTAB for ``connections.max.idle.ms`` and carries nothing.
    """
    if side == "broker":
        return recv_q > 0
    return state in _OPEN_STATES or (state in _CLOSING_STATES and send_q > 1)


class ProducerNamespace:
    """The producer's namespace, its veth link to the host, and the current impairment.

    Use as a context manager; :meth:`close` is idempotent.

    Args:
        index: Distinguishes namespaces of one process (0-63); picks the /30 subnet 10.213.<X>.0.
        seed: Seed of the packet handler's random numbers.
        congestion_control: ``net.ipv4.tcp_congestion_control`` inside the producer's namespace (the
            producer is the TCP sender whose reaction to loss matters); one of the kernel's
            ``tcp_available_congestion_control``. See :data:`DEFAULT_CONGESTION_CONTROL`.

    Raises:
        NetworkError: if not root, if ``ip``/``iptables`` fail, or if the kernel lacks
            ``congestion_control`` (the message lists the available ones).
    """

    def __init__(
        self, index: int = 0, seed: int = 0, congestion_control: str = DEFAULT_CONGESTION_CONTROL
    ) -> None:
        require_root()
        cleanup_stale()
        pid = os.getpid()
        base = f"{PREFIX}{pid}-{index}"
        self.name, self.router = f"{base}-p", f"{base}-r"
        tag = f"{pid % 100000}{index}"
        self.ns_if, self.rp_if, self.rh_if, self.host_if = (
            f"{k}{tag}"[:15] for k in ("kap", "krp", "krh", "kah")
        )
        octet = (pid * 7 + index) % 250 + 1
        self.ns_ip, self.router_ns_ip = f"10.213.{octet}.2", f"10.213.{octet}.1"
        self.router_host_ip, self.host_ip = f"10.214.{octet}.1", f"10.214.{octet}.2"
        self.seed = seed
        self.congestion_control = congestion_control
        self._allowed_before: str | None = None
        self.impairment = Impairment()
        self._handler: subprocess.Popen[str] | None = None
        self._closed = False
        try:
            self._create()
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------------------ lifecycle
    def _create(self) -> None:
        p, r = self.name, self.router
        _run(["ip", "netns", "add", p])
        _run(["ip", "netns", "add", r])
        _run(
            [
                "ip",
                "link",
                "add",
                self.ns_if,
                "netns",
                p,
                "type",
                "veth",
                "peer",
                "name",
                self.rp_if,
                "netns",
                r,
            ]
        )
        _run(["ip", "link", "add", self.host_if, "type", "veth", "peer", "name", self.rh_if, "netns", r])
        _run(["ip", "addr", "add", f"{self.host_ip}/30", "dev", self.host_if])
        _run(["ip", "link", "set", self.host_if, "up"])
        for cmd in (
            ["ip", "addr", "add", f"{self.ns_ip}/30", "dev", self.ns_if],
            ["ip", "link", "set", self.ns_if, "up"],
            ["ip", "link", "set", "lo", "up"],
            ["ip", "route", "add", "default", "via", self.router_ns_ip],
        ):
            self.exec_ok(cmd)
        for cmd in (
            ["ip", "addr", "add", f"{self.router_ns_ip}/30", "dev", self.rp_if],
            ["ip", "addr", "add", f"{self.router_host_ip}/30", "dev", self.rh_if],
            ["ip", "link", "set", self.rp_if, "up"],
            ["ip", "link", "set", self.rh_if, "up"],
            ["ip", "link", "set", "lo", "up"],
            ["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"],
            ["iptables", "-w", "-t", "nat", "-A", "POSTROUTING", "-o", self.rh_if, "-j", "MASQUERADE"],
            ["iptables", "-w", "-N", CHAIN],
            ["iptables", "-w", "-A", "FORWARD", "-i", self.rp_if, "-o", self.rh_if, "-j", CHAIN],
        ):
            self.router_ok(cmd)
        self._set_congestion_control()
        # Segmentation offloads would hand the queue 64 KiB super-packets; NetEm on a NIC sees wire packets.
        for ns, dev in ((p, self.ns_if), (r, self.rp_if), (r, self.rh_if), (None, self.host_if)):
            cmd = ["ethtool", "-K", dev, "tso", "off", "gso", "off", "gro", "off"]
            with contextlib.suppress(NetworkError, FileNotFoundError):
                _run(["ip", "netns", "exec", ns, *cmd] if ns else cmd)

    def _set_congestion_control(self) -> None:
        """Select :attr:`congestion_control` for new sockets in the producer's namespace.

        A namespace other than the root one may only select algorithms in the root namespace's
        ``tcp_allowed_congestion_control``; if it is missing there it is added for the lab's lifetime
        (:meth:`close` restores the list once no testbed namespace is left).
        """
        cc = self.congestion_control
        available = (_SYSCTL / "tcp_available_congestion_control").read_text().split()
        if cc not in available:
            raise NetworkError(
                f"congestion control {cc!r} is not available in this kernel; "
                f"available: {', '.join(available)}"
            )
        allowed_file = _SYSCTL / "tcp_allowed_congestion_control"
        allowed = allowed_file.read_text().split()
        if cc not in allowed:
            self._allowed_before = " ".join(allowed)
            allowed_file.write_text(" ".join([*allowed, cc]))
        self.exec_ok(["sysctl", "-q", "-w", f"net.ipv4.tcp_congestion_control={cc}"])

    def close(self) -> None:
        """Stop the handler and delete both namespaces (which removes the veth pairs and the rules)."""
        if self._closed:
            return
        self._closed = True
        self._stop_handler()
        existing = list_namespaces()
        for ns in (self.name, self.router):
            if ns in existing:
                _run(["ip", "netns", "delete", ns])
        with contextlib.suppress(NetworkError):  # the root end goes with its peer; make sure
            _run(["ip", "link", "delete", self.host_if])
        if self._allowed_before is not None and not list_namespaces():
            with contextlib.suppress(OSError):
                (_SYSCTL / "tcp_allowed_congestion_control").write_text(self._allowed_before)

    def __enter__(self) -> ProducerNamespace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------------------ processes
    def command(self, cmd: Sequence[str]) -> list[str]:
        """``cmd`` prefixed to run inside the namespace."""
        return ["ip", "netns", "exec", self.name, *cmd]

    def exec_ok(self, cmd: Sequence[str]) -> str:
        """Run ``cmd`` in the namespace; return stdout.

        Raises:
            NetworkError: if it exits non-zero.
        """
        return _run(self.command(cmd))

    def router_ok(self, cmd: Sequence[str]) -> str:
        """Run ``cmd`` in the router namespace; return stdout.

        Raises:
            NetworkError: if it exits non-zero.
        """
        return _run(["ip", "netns", "exec", self.router, *cmd])

    def popen(self, cmd: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
        """Start ``cmd`` in the namespace (``subprocess.Popen`` keyword arguments pass through)."""
        return subprocess.Popen(self.command(cmd), **kwargs)

    # ------------------------------------------------------------------------------ connections
    def open_connections(self) -> list[str]:
        """TCP connections between the producer's namespace and the brokers that may still deliver data.

        Producer side (sockets in the producer's namespace towards the brokers): an open socket, or an
        orphan the kernel keeps sending from after the producer process exited (FIN-WAIT-1, CLOSING,
        LAST-ACK with data not acknowledged yet: an ``acks=0`` producer's last requests). Broker side
        (peer = the router's address, which masquerades): data received but not read by Kafka yet.
        See :func:`carries_data`.

        Returns:
            One line per such connection (``side state recv-q send-q local peer``); empty = drained.
        """
        producer_side = self.exec_ok(["ss", "-tnH", "state", "all", "dst", self.host_ip])
        broker_side = _run(["ss", "-tnH", "state", "all", "dst", self.router_host_ip])
        out = []
        for side, text in (("producer", producer_side), ("broker", broker_side)):
            for line in text.splitlines():
                fields = line.split()
                if len(fields) >= 3 and carries_data(side, fields[0], int(fields[1]), int(fields[2])):
                    out.append(f"{side} {' '.join(fields)}")
        return out

    def wait_drained(self, timeout_s: float = 120.0, poll_s: float = 0.1) -> float:
        """Wait until no connection between the producer's namespace and the brokers is left.

        A producer process that exits with data in its sockets' send queues leaves it to the kernel,
        which goes on sending (and retransmitting through the impairment) for seconds; the brokers append
        what arrives. Ground truth read before that ends misses messages the audit consumer later counts.

        Args:
            timeout_s: Deadline, s.
            poll_s: Polling period, s.

        Returns:
            Seconds waited.

        Raises:
            NetworkError: if connections are still open at the deadline (the message lists them).
        """
        start = time.monotonic()
        while True:
            left = self.open_connections()
            if not left:
                return time.monotonic() - start
            if time.monotonic() - start > timeout_s:
                raise NetworkError(
                    f"connections between {self.name} and the brokers still open after {timeout_s:.0f} s: "
                    + "; ".join(left[:5])
                )
            time.sleep(poll_s)

    # ------------------------------------------------------------------------------ impairment
    def apply(self, impairment: Impairment) -> None:
        """Impair the producer's packets towards the brokers from now on (traffic may be flowing).

        Bernoulli loss alone is a kernel rule (``-m statistic --mode random``); delay or Gilbert-Elliott
        loss go through NFQUEUE to the userspace handler, which switches models between two packets.
        The chain is replaced atomically with ``iptables-restore --noflush``.

        Raises:
            NetworkError: if the rules or the handler cannot be changed.
        """
        if impairment.needs_userspace:
            self._ensure_handler(impairment)
            self._control({"impairment": impairment.model_dump(mode="json")})
            rules = [f"-A {CHAIN} -j NFQUEUE --queue-num {QUEUE}"]
        else:
            rules = []
            if isinstance(impairment.loss, BernoulliLoss) and impairment.loss.percent > 0:
                prob = impairment.loss.percent / 100.0
                rules = [f"-A {CHAIN} -m statistic --mode random --probability {prob:.6f} -j DROP"]
        table = "\n".join(["*filter", f":{CHAIN} - [0:0]", *rules, "COMMIT", ""])
        _run(["ip", "netns", "exec", self.router, "iptables-restore", "-w", "--noflush"], stdin=table)
        if not impairment.needs_userspace and self._handler is not None:
            self._control({"impairment": Impairment().model_dump(mode="json")})
        self.impairment = impairment

    def handler_stats(self) -> dict[str, int]:
        """Counters of the packet handler (packets, dropped, delayed, max_held); empty if none runs."""
        if self._handler is None:
            return {}
        return dict(self._control({"stats": True})["stats"])

    def _ensure_handler(self, impairment: Impairment) -> None:
        if self._handler is not None and self._handler.poll() is None:
            return
        cmd = [
            sys.executable,
            "-m",
            "testbed.nfqueue_handler",
            "--queue",
            str(QUEUE),
            "--seed",
            str(self.seed),
            "--impairment",
            impairment.model_dump_json(),
        ]
        path = os.pathsep.join(filter(None, [_project_root(), os.environ.get("PYTHONPATH")]))
        env = {**os.environ, "PYTHONPATH": path}
        self._handler = subprocess.Popen(
            ["ip", "netns", "exec", self.router, *cmd],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self._read_reply()

    def _control(self, msg: dict[str, Any]) -> dict[str, Any]:
        if self._handler is None or self._handler.stdin is None:
            raise NetworkError("the packet handler is not running")
        try:
            self._handler.stdin.write(json.dumps(msg) + "\n")
            self._handler.stdin.flush()
        except BrokenPipeError as exc:
            raise NetworkError(f"the packet handler died: {self._handler_error()}") from exc
        reply = self._read_reply()
        if not reply.get("ok"):
            raise NetworkError(f"the packet handler refused {msg}: {reply.get('error')}")
        return reply

    def _read_reply(self) -> dict[str, Any]:
        assert self._handler is not None and self._handler.stdout is not None
        line = self._handler.stdout.readline()
        if not line:
            raise NetworkError(f"the packet handler exited: {self._handler_error()}")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def _handler_error(self) -> str:
        h = self._handler
        if h is None:
            return "not started"
        with contextlib.suppress(subprocess.TimeoutExpired):
            h.wait(2)
        err: IO[str] | None = h.stderr
        text = err.read() if err is not None and h.poll() is not None else ""
        return (text or f"exit code {h.poll()}").strip()[-2000:]

    def _stop_handler(self) -> None:
        h, self._handler = self._handler, None
        if h is None:
            return
        with contextlib.suppress(OSError, ValueError):
            if h.stdin is not None:
                h.stdin.close()
        try:
            h.wait(5)
        except subprocess.TimeoutExpired:
            h.kill()
            h.wait(5)
        for stream in (h.stdout, h.stderr):
            if stream is not None:
                stream.close()


def _project_root() -> str:
    return str(Path(__file__).resolve().parent.parent)
