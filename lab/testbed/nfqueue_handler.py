"""The userspace packet handler: delays and drops the packets an NFQUEUE rule hands it.

Runs *inside* the producer's network namespace (NFQUEUE queues are per namespace), started by
:class:`testbed.netns.ProducerNamespace` as ``ip netns exec NS python -m testbed.nfqueue_handler``.
Each packet queued by ``iptables ... -j NFQUEUE --queue-num Q`` gets a loss decision and a release time
from the current :class:`~testbed.impairment.Impairment`; dropped packets get ``NF_DROP`` at once, the
others ``NF_ACCEPT`` when their delay has passed (a heap ordered by release time, so jitter reorders
packets as NetEm does). The verdict is given after the callback returns (netfilterqueue >= 1.0).

Control protocol on stdin/stdout, one JSON object per line:
``{"impairment": {...}}`` replaces the impairment (acknowledged with ``{"ok": true, "stats": {...}}``
once in effect); ``{"stats": true}`` asks for the counters; end of input releases every held packet and
exits. A line that is not valid gets ``{"ok": false, "error": "..."}`` and changes nothing.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import json
import os
import random
import selectors
import sys
import time
from typing import Any

from netfilterqueue import COPY_META, NetfilterQueue, Packet
from pydantic import ValidationError

from testbed.impairment import Impairment, LossProcess


class Handler:
    """Holds packets until their release time; counts what it did.

    Args:
        impairment: Initial impairment.
        seed: Seed for the delay and loss random numbers.
    """

    def __init__(self, impairment: Impairment, seed: int) -> None:
        self.rng = random.Random(seed)
        self.held: list[tuple[float, int, Packet]] = []
        self.order = itertools.count()
        self.stats = {"packets": 0, "dropped": 0, "delayed": 0, "max_held": 0}
        self.set(impairment)

    def set(self, impairment: Impairment) -> None:
        """Switch to a new impairment (packets already held keep their release times)."""
        self.impairment = impairment
        self.loss = LossProcess(impairment.loss, self.rng)

    def on_packet(self, pkt: Packet) -> None:
        """NFQUEUE callback: drop now, accept now, or hold until the sampled delay has passed."""
        self.stats["packets"] += 1
        if self.loss.drop():
            self.stats["dropped"] += 1
            pkt.drop()
            return
        delay = self.impairment.delay
        d_ms = delay.sample_ms(self.rng) if delay is not None else 0.0
        if d_ms <= 0.0:
            pkt.accept()
            return
        self.stats["delayed"] += 1
        heapq.heappush(self.held, (time.monotonic() + d_ms / 1000.0, next(self.order), pkt))
        self.stats["max_held"] = max(self.stats["max_held"], len(self.held))

    def release_due(self) -> float | None:
        """Accept every packet whose time has come; return seconds until the next one (None: none held)."""
        now = time.monotonic()
        while self.held and self.held[0][0] <= now:
            heapq.heappop(self.held)[2].accept()
        return max(0.0, self.held[0][0] - now) if self.held else None

    def release_all(self) -> None:
        """Accept every held packet (shutdown)."""
        while self.held:
            heapq.heappop(self.held)[2].accept()


def _reply(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _control(handler: Handler, line: str) -> None:
    try:
        msg = json.loads(line)
        if "impairment" in msg:
            handler.set(Impairment.model_validate(msg["impairment"]))
        _reply({"ok": True, "stats": handler.stats})
    except (ValueError, ValidationError) as exc:
        _reply({"ok": False, "error": str(exc)})


def serve(queue_num: int, impairment: Impairment, seed: int) -> None:
    """Serve NFQUEUE ``queue_num`` until stdin closes.

    Raises:
        OSError: if the queue cannot be bound (not root, or another handler holds it).
    """
    handler = Handler(impairment, seed)
    nfq = NetfilterQueue()
    # Held packets stay in the kernel queue until their verdict: make room for ~1 s of heavy traffic.
    nfq.bind(queue_num, handler.on_packet, max_len=65536, mode=COPY_META, sock_len=8 * 1024 * 1024)
    nfq_fd = nfq.get_fd()
    os.set_blocking(sys.stdin.fileno(), False)
    sel = selectors.DefaultSelector()
    sel.register(nfq_fd, selectors.EVENT_READ, "nfq")
    sel.register(sys.stdin.fileno(), selectors.EVENT_READ, "ctl")
    pending = ""
    _reply({"ok": True, "ready": True, "stats": handler.stats})
    try:
        while True:
            timeout = handler.release_due()
            for key, _ in sel.select(timeout):
                if key.data == "nfq":
                    nfq.run(block=False)
                    continue
                chunk = os.read(sys.stdin.fileno(), 65536).decode()
                if not chunk:
                    return
                pending += chunk
                while "\n" in pending:
                    line, pending = pending.split("\n", 1)
                    if line.strip():
                        _control(handler, line)
    finally:
        handler.release_all()
        nfq.unbind()


def main() -> None:
    """Entry point: ``python -m testbed.nfqueue_handler --queue N --impairment JSON --seed S``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queue", type=int, default=0)
    ap.add_argument("--impairment", default="{}")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    serve(args.queue, Impairment.model_validate_json(args.impairment), args.seed)


if __name__ == "__main__":
    main()
