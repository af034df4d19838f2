"""Carry out a chaos schedule against a running soak (one thread, events in order).

Each event is recorded in ``records/chaos.jsonl`` with ``planned_ms`` (load start + ``at_s``),
``started_ms``, ``ended_ms`` (when the faulty component is back: broker in the cluster with every
partition in sync, consumer or worker running again, driver through its first micro-batch, Alertmanager
ready, cut undone and replicas in sync), ``detail`` and ``error`` (the event could not be carried out;
the soak goes on).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from confluent_kafka.admin import AdminClient

from audit_record import DEFAULT_AUDIT_TOPIC, now_ms
from soak.network import BrokerCut
from soak.schedule import ChaosEvent

if TYPE_CHECKING:
    from soak.run import Soak

log = logging.getLogger(__name__)
IN_SYNC_TIMEOUT_S = 240.0
"""How long a broker fault may take to heal (every partition in sync again), s."""


class Chaos(threading.Thread):
    """The chaos thread of one soak.

    Attributes:
        done: The events carried out so far (the dicts written to ``chaos.jsonl``).
        busy: Components the running event has taken down on purpose (the soak does not fail on them).
    """

    def __init__(self, soak: Soak) -> None:
        super().__init__(name="chaos", daemon=True)
        self.soak = soak
        self.done: list[dict[str, Any]] = []
        self.busy: set[str] = set()
        self._abort = threading.Event()

    def abort(self) -> None:
        """Stop after the running event (its clean-up still runs) and wait for the thread."""
        self._abort.set()
        if self.is_alive():
            self.join(120)

    def _sleep(self, seconds: float) -> None:
        self._abort.wait(seconds)

    def run(self) -> None:
        """Carry out every event at its time, one after the other."""
        for event in self.soak.schedule.events:
            planned = self.soak.load_started_ms + int(event.at_s * 1000)
            wait_s = (planned - now_ms()) / 1000
            if wait_s > 0:
                self._sleep(wait_s)
            if self._abort.is_set():
                return
            record: dict[str, Any] = {
                "label": event.label,
                "action": event.action,
                "target": event.target,
                "planned_ms": planned,
                "started_ms": now_ms(),
                "ended_ms": None,
                "detail": "",
                "error": None,
            }
            log.info("chaos: %s", event.label)
            try:
                record["detail"] = getattr(self, event.action)(event) or ""
            except Exception as exc:
                log.exception("chaos event %s failed", event.label)
                record["error"] = repr(exc)
            finally:
                self.busy.clear()
            record["ended_ms"] = now_ms()
            self.done.append(record)
            with open(self.soak.records / "chaos.jsonl", "a") as f:
                f.write(json.dumps(record) + "\n")

    # ------------------------------------------------------------------------------------ helpers
    def _wait_in_sync(self, timeout_s: float = IN_SYNC_TIMEOUT_S) -> float:
        """Wait until every broker is registered and every partition in sync; return the seconds waited."""
        from soak.run import under_replicated

        t0 = time.monotonic()
        deadline = t0 + timeout_s
        while under_replicated(self.soak.bootstrap) != 0:
            if time.monotonic() > deadline:
                raise TimeoutError(f"partitions not in sync after {timeout_s:.0f} s")
            time.sleep(1.0)
        return time.monotonic() - t0

    def _restart_broker(self, node: Any, kill: bool, down_s: float) -> str:
        cluster = self.soak.cluster
        assert cluster is not None
        name = f"broker-{node.node_id}"
        self.busy.add(name)
        pid = node.pid
        cluster.stop_node(node, kill=kill)
        self.soak.components[name].ended("SIGKILL" if kill else "SIGTERM")
        self._sleep(down_s)
        cluster.start_node(node, timeout_s=120)
        waited = self._wait_in_sync()
        return f"{name} (pid {pid}) {'SIGKILL' if kill else 'stopped'}; in sync {waited:.0f} s after restart"

    # ------------------------------------------------------------------------------------ actions
    def rolling_restart(self, event: ChaosEvent) -> str:
        """Every broker in turn: controlled shutdown, restart, wait until in sync."""
        cluster = self.soak.cluster
        assert cluster is not None
        return "; ".join(self._restart_broker(node, kill=False, down_s=0) for node in cluster.nodes)

    def kill_audit_leader(self, event: ChaosEvent) -> str:
        """SIGKILL the broker leading most audit topic partitions; restart it after ``restart_after_s``."""
        cluster = self.soak.cluster
        assert cluster is not None
        md = AdminClient({"bootstrap.servers": self.soak.bootstrap, "log_level": 0}).list_topics(
            DEFAULT_AUDIT_TOPIC, timeout=10
        )
        leaders = Counter(p.leader for p in md.topics[DEFAULT_AUDIT_TOPIC].partitions.values())
        leader, n = leaders.most_common(1)[0]
        node = next(nd for nd in cluster.nodes if nd.node_id == leader)
        return f"leader of {n} audit partition(s): " + self._restart_broker(
            node, kill=True, down_s=event.restart_after_s
        )

    def kill_audit_consumer(self, event: ChaosEvent) -> str:
        """SIGKILL audit consumer ``target``; restart it after ``restart_after_s``."""
        assert event.target is not None
        name = f"audit-consumer-{event.target}"
        proc = self.soak.consumers[event.target - 1]
        self.busy.add(name)
        pid = proc.pid
        proc.kill()
        self.soak.components[name].ended("SIGKILL")
        self._sleep(event.restart_after_s)
        new = proc.start()
        return f"{name} pid {pid} SIGKILL, restarted as {new}"

    def kill_spark_driver(self, event: ChaosEvent) -> str:
        """SIGKILL the driver (Python and its JVM); restart it from its checkpoint; wait for a micro-batch."""
        driver = self.soak.driver
        assert driver is not None and driver.pid is not None
        self.soak.wait_driver_ready(driver.pid)  # kill a driver that runs micro-batches, not one starting
        self.busy.add("spark-driver")
        pid = driver.pid
        driver.kill()
        self.soak.components["spark-driver"].ended("SIGKILL")
        self._sleep(event.restart_after_s)
        t0 = time.monotonic()
        self.soak.start_driver(timeout_s=300)
        took = time.monotonic() - t0
        return f"driver pid {pid} SIGKILL; restarted as {driver.pid}, first micro-batch {took:.0f} s later"

    def kill_spark_worker(self, event: ChaosEvent) -> str:
        """SIGKILL worker ``target`` and its executor; restart the worker; wait for a new executor on it."""
        spark = self.soak.spark
        assert spark is not None and event.target is not None
        n = event.target
        self.busy.update({f"spark-worker-{n}", f"spark-executor-{n}"})
        killed = spark.kill_worker(n)
        self.soak.components[f"spark-worker-{n}"].ended("SIGKILL")
        self.soak.components[f"spark-executor-{n}"].ended("SIGKILL")
        self._sleep(event.restart_after_s)
        spark.restart_worker(n)
        deadline = time.monotonic() + 180
        while not spark.workers[n - 1].executor_pids() and time.monotonic() < deadline:
            time.sleep(1.0)
        executor = spark.workers[n - 1].executor_pids()
        new = executor or "none yet"
        return f"worker {n} and executor SIGKILL (pids {killed}); worker back, new executor {new}"

    def cut_broker(self, event: ChaosEvent) -> str:
        """Cut broker ``target`` off with iptables for ``duration_s``; wait until in sync again."""
        cluster = self.soak.cluster
        assert cluster is not None and event.target is not None
        node = next(nd for nd in cluster.nodes if nd.node_id == event.target)
        assert node.pid is not None
        with BrokerCut(node.pid, [node.broker_port, node.controller_port]) as cut:
            self._sleep(event.duration_s)
        waited = self._wait_in_sync()
        return (
            f"broker-{node.node_id} cut off {event.duration_s:.0f} s ({len(cut.cut_ports)} ports); "
            f"in sync {waited:.0f} s after"
        )

    def restart_alertmanager(self, event: ChaosEvent) -> str:
        """Stop Alertmanager (SIGTERM) and start it again after ``restart_after_s``."""
        am = self.soak.alertmanager
        assert am is not None
        self.busy.add("alertmanager")
        pid = am.process.pid
        am.stop()
        self.soak.components["alertmanager"].ended("SIGTERM")
        self._sleep(event.restart_after_s)
        am.start()
        return f"alertmanager pid {pid} stopped; restarted as {am.process.pid}"
