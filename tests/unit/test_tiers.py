"""Issue 15 items 3-5 without Kafka: replication naming, tier order, the tier view of reconciliation, the
MirrorMaker 2 configuration, the AuditedConsumer's counting and durability, the downstream-tier alert,
the tier table, report section and metrics."""

from __future__ import annotations

import os
import stat
from typing import Any

import pandas as pd
import pytest
from rich.console import Console

from alerts import AlertEngine, AlertSettings, AlertStatus
from alerts.event import COMPLETENESS_BELOW_TARGET
from audit_consumer import audited as audited_mod
from audit_consumer.audited import AuditedConsumer, ConsumerAuditSettings
from audit_record import AuditRecord, MalformedRecordError, consumer_tier, decode, stamp
from audit_record.tiers import TierOrder
from audit_record.window_result import FINAL, PROVISIONAL, TIER_FIELDS
from dashboards.report import tier_section
from kafka_audit.tier_view import tiers_table
from kafka_plumbing.errors import ConfigError
from kafka_plumbing.mirror import BYTE_ARRAY_CONVERTER, MirrorError, MirrorMaker
from kafka_plumbing.replication import ReplicationNaming
from spark_streaming.metrics import ResultMetrics
from spark_streaming.reconcile import compact, merge, reconcile

# ------------------------------------------------------------------------------------------ naming


def test_default_policy_maps_copies_of_known_aliases_back_to_the_source_topic():
    n = ReplicationNaming("default", ("A", "B"))
    assert n.source_topic("A.orders") == "orders"
    assert n.source_topic("B.A.orders") == "orders"  # two hops, as MM2's originalTopic
    assert n.source_topic("audit.weblog") == "audit.weblog"  # not an alias: a dot is just a dot
    assert n.source_topic("orders") == "orders"
    assert n.source_topic("A.") == "A."
    assert n.source_alias("A.orders") == "A" and n.source_alias("orders") is None
    assert n.replicated_topic("A", "orders") == "A.orders"
    assert n.policy_class.endswith("DefaultReplicationPolicy")


def test_identity_policy_and_invalid_aliases():
    n = ReplicationNaming("identity", ("A",))
    assert n.source_topic("A.orders") == "A.orders" and n.replicated_topic("A", "orders") == "orders"
    assert n.policy_class.endswith("IdentityReplicationPolicy")
    for bad in (("A.x",), ("",)):
        with pytest.raises(ConfigError):
            ReplicationNaming("default", bad)
    with pytest.raises(ConfigError):
        ReplicationNaming("prefix", ("A",))  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------ tiers


def test_consumer_tier_is_a_valid_audit_record_tier():
    rec = AuditRecord(tier=consumer_tier("app"), source="app", topic="t", window_start_ms=0, window_end_ms=10)
    assert rec.validate().tier == "consumer:app"
    with pytest.raises(MalformedRecordError):
        AuditRecord(tier="consumer:", source="s", topic="t", window_start_ms=0, window_end_ms=10).validate()


def test_tier_order_derived_from_names_and_clusters():
    order = TierOrder.derive(["A", "B"])
    tiers = ["consumer:z", "cluster:B", "cluster:other", "cluster:A", "producer", "consumer:a"]
    assert order.sort(tiers) == [
        "producer",
        "cluster:A",
        "cluster:B",
        "cluster:other",
        "consumer:a",
        "consumer:z",
    ]
    present = ["producer", "cluster:A", "cluster:B", "consumer:a", "consumer:z"]
    assert order.previous("cluster:A", present) == "producer"
    assert order.previous("cluster:B", present) == "cluster:A"
    # Two consumer groups are parallel: each one's previous tier is the replica, never the other group.
    assert order.previous("consumer:a", present) == "cluster:B"
    assert order.previous("consumer:z", present) == "cluster:B"
    assert order.previous("producer", present) is None
    # Without B in the window, the consumer tier compares with A.
    assert order.previous("consumer:a", ["producer", "cluster:A", "consumer:a"]) == "cluster:A"


def test_explicit_tier_order_with_patterns():
    order = TierOrder.derive(["A"], ["cluster:B", "cluster:A", "consumer:*"])
    assert order.levels[0] == "producer"  # always first
    assert order.sort(["cluster:A", "cluster:B", "consumer:x"]) == ["cluster:B", "cluster:A", "consumer:x"]
    assert order.previous("cluster:A", ["producer", "cluster:A", "cluster:B"]) == "cluster:B"


# ---------------------------------------------------------------------------------- reconciliation
END = 10_000


def _snap(order, **kw):
    base = dict(tier="producer", source="s", topic="t", window_start_ms=0, window_end_ms=END)
    base.update(kw)
    return compact(AuditRecord(**base), *order)


def test_merge_keeps_the_time_a_key_first_reached_its_counts():
    state: dict[str, Any] = {}
    merge(
        state,
        "k",
        _snap((0, 1), tier="cluster:B", producer_id="p", received=5, unique=5, emitted_at_ms=11_000),
    )
    merge(
        state,
        "k",
        _snap((0, 2), tier="cluster:B", producer_id="p", received=9, unique=9, emitted_at_ms=40_000),
    )
    merge(
        state,
        "k",
        _snap(
            (0, 3), tier="cluster:B", producer_id="p", received=9, unique=9, final=True, emitted_at_ms=70_000
        ),
    )
    assert state["k"]["changed_at_ms"] == 40_000  # the final re-emission did not move it
    assert state["k"]["emitted_at_ms"] == 70_000


def test_each_tier_against_the_producers_and_the_tier_before():
    snaps = [
        _snap((0, 1), producer_id="p", sent=100, emitted_at_ms=10_500),
        _snap((1, 1), tier="cluster:A", producer_id="p", received=100, unique=100, emitted_at_ms=11_000),
        # MirrorMaker 2 lost 10 and copied 5 twice; it caught up 35 s after the window's end.
        _snap(
            (1, 2),
            tier="cluster:B",
            producer_id="p",
            received=95,
            unique=90,
            duplicated=5,
            emitted_at_ms=45_000,
        ),
        # The application read everything on B and re-read 7 after a crash.
        _snap(
            (1, 3),
            tier="consumer:app",
            producer_id="p",
            received=102,
            unique=90,
            duplicated=12,
            emitted_at_ms=47_000,
        ),
    ]
    rows = reconcile("t", 0, END, snaps, ["A", "B"], FINAL)
    assert [r["tier"] for r in rows] == ["cluster:A", "cluster:B", "consumer:app"]
    a, b, c = rows
    assert (a["previous_tier"], a["previous_unique"], a["completeness_vs_previous"]) == ("producer", 100, 1.0)
    assert (a["tier_rank"], b["tier_rank"], c["tier_rank"]) == (1, 2, 4)
    assert a["tier_lag_ms"] == 1_000 and b["tier_lag_ms"] == 35_000 and c["tier_lag_ms"] == 37_000
    assert (b["previous_tier"], b["previous_unique"], b["completeness_vs_previous"]) == (
        "cluster:A",
        100,
        0.9,
    )
    assert (b["duplicates_added"], b["duplicate_rate_vs_previous"]) == (5, 0.05)
    assert b["completeness"] == 0.9 and b["duplicate_rate"] == 0.05  # against the producers, as before
    assert (c["previous_tier"], c["completeness_vs_previous"], c["duplicates_added"]) == ("cluster:B", 1.0, 7)
    assert c["duplicate_rate_vs_previous"] == pytest.approx(7 / 90)
    assert set(TIER_FIELDS) <= set(a)


def test_a_silent_tier_has_no_lag_and_nothing_against_an_empty_previous():
    rows = reconcile("t", 0, END, [_snap((0, 1), producer_id="p", sent=0)], ["A", "B"], PROVISIONAL)
    a, b = rows
    assert a["tier_lag_ms"] is None and a["completeness_vs_previous"] is None
    assert b["previous_tier"] == "cluster:A" and b["previous_unique"] == 0


# ------------------------------------------------------------------------------------- MirrorMaker 2


def test_mirror_maker_configuration(tmp_path):
    mm = MirrorMaker(tmp_path / "mm", "A", "B", "127.0.0.1:1", "127.0.0.1:2", topics=["orders", "web.*"])
    props = mm.properties()
    assert props["clusters"] == "A, B"
    assert props["A->B.enabled"] == "true" and props["B->A.enabled"] == "false"
    assert props["A->B.topics"] == "orders,web.*"
    assert (
        props["header.converter"]
        == props["key.converter"]
        == props["value.converter"]
        == BYTE_ARRAY_CONVERTER
    )
    assert props["sync.group.offsets.enabled"] == "false"
    for name in (
        "replication.factor",
        "offset.storage.replication.factor",
        "status.storage.replication.factor",
        "config.storage.replication.factor",
        "checkpoints.topic.replication.factor",
        "heartbeats.topic.replication.factor",
        "offset-syncs.topic.replication.factor",
    ):
        assert props[name] == "1", name
    assert props["emit.heartbeats.interval.seconds"] == props["emit.checkpoints.interval.seconds"] == "1"
    assert mm.replicated_topic("orders") == "A.orders"
    path = mm.write_config()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert "A.bootstrap.servers = 127.0.0.1:1\n" in path.read_text()
    mm._save()
    again = MirrorMaker.load(tmp_path / "mm")
    assert again is not None and again.properties() == props and not again.running
    identity = MirrorMaker(tmp_path / "i", "A", "B", "x:1", "y:2", policy="identity")
    assert identity.replicated_topic("orders") == "orders"
    assert identity.properties()["replication.policy.class"].endswith("IdentityReplicationPolicy")
    with pytest.raises(MirrorError):
        MirrorMaker(tmp_path / "x", "A", "A", "x:1", "y:2")


# --------------------------------------------------------------------------------- AuditedConsumer
class FakeMessage:
    def __init__(self, topic, partition, offset, ts, headers, value=b"v"):
        self._t, self._p, self._o, self._ts, self._h, self._v = topic, partition, offset, ts, headers, value

    def error(self):
        return None

    def topic(self):
        return self._t

    def partition(self):
        return self._p

    def offset(self):
        return self._o

    def timestamp(self):
        return (1, self._ts)

    def headers(self):
        return self._h

    def value(self):
        return self._v

    def key(self):
        return None


class FakeConsumer:
    """Hands out a list of messages; remembers commits."""

    def __init__(self, config, **kw):
        self.config = config
        self.queue: list[FakeMessage] = []
        self.commits = 0
        self.on_assign = self.on_revoke = None

    def subscribe(self, topics, on_assign=None, on_revoke=None, on_lost=None):
        self.on_assign, self.on_revoke = on_assign, on_revoke

    def poll(self, timeout=None):
        return self.queue.pop(0) if self.queue else None

    def consume(self, num_messages=1, timeout=-1):
        out, self.queue = self.queue[:num_messages], self.queue[num_messages:]
        return out

    def commit(self, *a, **kw):
        self.commits += 1

    def close(self):
        pass

    def assignment(self):
        return ["delegated"]


class FakeBroker:
    """The audit cluster: what committed transactions wrote, by topic."""

    def __init__(self):
        self.topics: dict[str, list[tuple[bytes | None, bytes]]] = {}


class FakeProducer:
    def __init__(self, broker, config):
        self.broker, self.config, self.pending = broker, config, []

    def init_transactions(self, timeout=None):
        pass

    def begin_transaction(self):
        self.pending = []

    def produce(self, topic, value, key=None, headers=None, timestamp=0):
        self.pending.append((topic, key, value))

    def commit_transaction(self, timeout=None):
        for topic, key, value in self.pending:
            self.broker.topics.setdefault(topic, []).append((key, value))
        self.pending = []

    def abort_transaction(self, timeout=None):
        self.pending = []

    def flush(self, timeout=None):
        return 0

    def close(self, timeout=None):
        pass


class StateMessage:
    """A state-topic record of the fake broker's one-partition log (CreateTime: its position)."""

    def __init__(self, key, value, offset=0):
        self._k, self._v, self._offset = key, value, offset

    def key(self):
        return self._k

    def value(self):
        return self._v

    def partition(self):
        return 0

    def timestamp(self):
        return (1, self._offset)


@pytest.fixture
def broker(monkeypatch):
    b = FakeBroker()
    monkeypatch.setattr(audited_mod, "Consumer", FakeConsumer)
    monkeypatch.setattr(audited_mod, "Producer", lambda config: FakeProducer(b, config))
    monkeypatch.setattr(audited_mod, "ensure_consumer_tier_topics", lambda *a, **kw: None)
    monkeypatch.setattr(
        audited_mod,
        "read_to_end",
        lambda conf, topic, **kw: [StateMessage(k, v, i) for i, (k, v) in enumerate(b.topics.get(topic, []))],
    )
    return b


PID = "prod@host.1.abcd"


def _msgs(topic, seqs, ts=1_800_000_000_000, partition=0, first_offset=0):
    return [
        FakeMessage(topic, partition, first_offset + i, ts + i, [stamp.header(PID, s)])
        for i, s in enumerate(seqs)
    ]


def _newest_snapshots(broker):
    newest = {}
    for key, value in broker.topics.get("__kafka_audit", []):
        newest[key] = decode(value)
    return list(newest.values())


def test_audited_consumer_counts_replicated_topic_under_its_source_and_commits_after_flushing(broker):
    audit = ConsumerAuditSettings(window_ms=10_000, replication_sources=["A"], snapshot_interval_ms=60_000)
    c = AuditedConsumer({"bootstrap.servers": "b:1", "group.id": "app"}, audit)
    assert c.tier == "consumer:app" and c.assignment() == ["delegated"]  # the rest is delegated
    c.subscribe(["A.orders"])
    c._consumer.queue = _msgs("A.orders", [1, 2, 3, 3])
    got = c.consume(10, 1.0)
    assert len(got) == 4 and c.stats.messages == 4
    assert "__kafka_audit" not in broker.topics  # nothing written before the interval or a commit
    c.commit(asynchronous=False)
    assert c._consumer.commits == 1
    [snap] = _newest_snapshots(broker)
    assert (snap.tier, snap.source, snap.topic, snap.partition) == ("consumer:app", "app", "orders", 0)
    assert (snap.received, snap.unique, snap.duplicated, snap.producer_id) == (4, 3, 1, PID)
    c.close()


def test_re_reads_after_a_crash_are_duplicates_at_the_consumer_tier(broker):
    audit = ConsumerAuditSettings(window_ms=10_000, snapshot_interval_ms=60_000)
    first = AuditedConsumer({"bootstrap.servers": "b:1", "group.id": "app"}, audit)
    first.subscribe(["orders"])
    first._consumer.queue = _msgs("orders", range(1, 101))
    assert len(first.consume(60, 1.0)) == 60
    first.commit()  # offsets of 60 committed, counts and state written first
    assert len(first.consume(40, 1.0)) == 40
    first.flush_audit()  # the periodic write: 100 recorded; then the application crashes (no commit)
    # The restarted instance re-reads from the committed offset 60.
    second = AuditedConsumer({"bootstrap.servers": "b:1", "group.id": "app"}, audit)
    second.subscribe(["orders"])
    second._consumer.queue = _msgs("orders", range(61, 101), first_offset=60)
    second._consumer.on_assign(second._consumer, [type("TP", (), {"topic": "orders", "partition": 0})()])
    second.consume(100, 1.0)
    second.close()
    [snap] = _newest_snapshots(broker)
    assert (snap.received, snap.unique, snap.duplicated) == (140, 100, 40)


def test_states_go_where_librdkafka_puts_keys_whatever_the_extra_config(broker, monkeypatch):
    # the JVM interceptors place state keys so (ConsistentRandomPartitioner): one partition per key
    configs = []
    monkeypatch.setattr(
        audited_mod, "Producer", lambda config: configs.append(config) or FakeProducer(broker, config)
    )
    audit = ConsumerAuditSettings(
        window_ms=10_000, snapshot_interval_ms=60_000, extra_config={"partitioner": "murmur2_random"}
    )
    c = AuditedConsumer({"bootstrap.servers": "b:1", "group.id": "app"}, audit)
    c.subscribe(["orders"])
    c._consumer.queue = _msgs("orders", range(1, 11))
    assert len(c.consume(10, 1.0)) == 10
    c.commit()
    c.close()
    assert configs and all(cfg["partitioner"] == "consistent_random" for cfg in configs)
    assert any(t == audit.state_topic for t in broker.topics)


def test_audited_consumer_needs_a_group_and_never_raises_on_audit_failures(broker, monkeypatch):
    with pytest.raises(ConfigError):
        AuditedConsumer({"bootstrap.servers": "b:1"})

    class Failing(FakeProducer):
        def commit_transaction(self, timeout=None):
            from confluent_kafka import KafkaError, KafkaException

            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "slow"))

    monkeypatch.setattr(audited_mod, "Producer", lambda config: Failing(broker, config))
    c = AuditedConsumer(
        {"bootstrap.servers": "b:1", "group.id": "g"}, ConsumerAuditSettings(window_ms=10_000)
    )
    c._consumer.queue = _msgs("orders", [1, 2])
    c.consume(5, 1.0)
    assert c.flush_audit() == 0 and c.stats.failures == 1
    monkeypatch.setattr(audited_mod, "Producer", lambda config: FakeProducer(broker, config))
    c._producer = None
    assert c.flush_audit() == 1  # written in full on the next try
    [snap] = _newest_snapshots(broker)
    assert (snap.received, snap.unique) == (2, 2)


# ------------------------------------------------------------------------------------------ alerts
T0 = 1_800_000_000_000
W = 10_000


def tier_row(i, tier="cluster:B", state="provisional", unique=1000, previous="cluster:A", **kw):
    row = {
        "kind": "result",
        "topic": "t",
        "tier": tier,
        "state": state,
        "window_start_ms": T0 + i * W,
        "window_end_ms": T0 + (i + 1) * W,
        "sent": 1000,
        "unique": unique,
        "duplicated": 0,
        "completeness": unique / 1000,
        "loss_rate": 1 - unique / 1000,
        "duplicate_rate": 0.0,
        "unaudited_producers": 0,
        "previous_tier": previous,
        "previous_unique": 1000,
        "completeness_vs_previous": unique / 1000,
    }
    row.update(kw)
    return row


def test_a_lagging_replica_fires_the_completeness_alert_and_final_windows_resolve_it():
    engine = AlertEngine(AlertSettings(completeness_tier_lag_ms=15_000))
    end0 = T0 + W
    # Windows 0 and 1 of B stay behind A (MirrorMaker 2 stopped); nothing is judged before the allowed lag.
    assert engine.observe([tier_row(0, unique=300), tier_row(1, unique=0)], now_ms=end0 + 5_000) == []
    [fired] = engine.observe([], now_ms=end0 + 16_000)
    assert (fired.alertname, fired.tier, fired.status) == (
        COMPLETENESS_BELOW_TARGET,
        "cluster:B",
        AlertStatus.FIRING,
    )
    assert fired.value == 0.3 and "700 message(s)" in fired.description
    assert engine.observe([], now_ms=end0 + 26_000) == []  # window 1: still firing, judged once
    # MirrorMaker 2 catches up: the final windows are complete, two of them resolve the alert.
    assert engine.observe([tier_row(0, state="final")], now_ms=end0 + 60_000) == []
    [resolved] = engine.observe([tier_row(1, state="final")], now_ms=end0 + 70_000)
    assert resolved.status == AlertStatus.RESOLVED
    assert engine.to_state()["lag_judged"] == []


def test_the_first_tier_after_the_producers_is_judged_on_final_windows_only():
    engine = AlertEngine(AlertSettings(completeness_tier_lag_ms=15_000))
    rows = [tier_row(0, tier="cluster:A", unique=10, previous="producer")]
    assert engine.observe(rows, now_ms=T0 + W + 60_000) == []
    # Caught up in time: nothing to say either.
    engine.observe([tier_row(1, unique=1000)], now_ms=T0 + 2 * W + 1_000)
    assert engine.observe([], now_ms=T0 + 2 * W + 30_000) == []


# ------------------------------------------------------------------------- table, report, metrics


def _tier_results():
    snaps = [
        _snap((0, 1), producer_id="p", sent=100, emitted_at_ms=10_500),
        _snap((1, 1), tier="cluster:A", producer_id="p", received=100, unique=100, emitted_at_ms=11_000),
        _snap(
            (1, 2),
            tier="cluster:B",
            producer_id="p",
            received=95,
            unique=90,
            duplicated=5,
            emitted_at_ms=45_000,
        ),
        _snap((1, 3), tier="consumer:app", producer_id="p", received=90, unique=90, emitted_at_ms=47_000),
    ]
    return reconcile("orders", 0, END, snaps, ["A", "B"], FINAL)


def test_tiers_table_shows_every_tier_in_flow_order():
    table = tiers_table(_tier_results())
    console = Console(width=200, record=True)
    console.print(table)
    text = console.export_text()
    header = next(line for line in text.splitlines() if "cluster:A" in line)
    assert header.index("cluster:A") < header.index("cluster:B") < header.index("consumer:app")
    assert "90.00% 35.0s +5 dup" in text and "100.00% 1.0s" in text


def test_report_tier_section_and_old_results_without_tier_fields():
    frame = pd.DataFrame(_tier_results())
    html = tier_section(frame)
    assert html.index("cluster:A") < html.index("cluster:B") < html.index("consumer:app")
    assert "90.000%" in html and "35.0" in html and "<img" in html
    old = frame.drop(columns=list(TIER_FIELDS))
    assert "cluster:B" in tier_section(old)


def test_tier_metrics():
    m = ResultMetrics()
    provisional = [dict(r, state="provisional") for r in _tier_results()]
    m.observe(provisional, [], [])
    assert m.tier_behind.labels("orders", "cluster:B")._value.get() == 10
    m.observe(_tier_results(), [], [])
    assert m.tier_behind.labels("orders", "cluster:B")._value.get() == 0
    assert m.tier_lag.labels("orders", "cluster:B")._value.get() == 35.0
    assert m.tier_completeness.labels("orders", "cluster:B")._value.get() == 0.9
    assert m.tier_duplicates_added.labels("orders", "cluster:B")._value.get() == 5


def test_live_comparison_and_training_take_the_first_tier_only():
    from predictor.training_store import skip_reason
    from spark_streaming.predict import predictable

    rows = [
        dict(r, kind="result", acks="all", batch_num_messages=4, message_timeout_ms=300_000, sent=1000)
        for r in _tier_results()
    ]
    frame = pd.DataFrame(rows)
    assert list(predictable(frame)) == [True, False, False]
    assert list(predictable(frame.drop(columns=["previous_tier"]))) == [True, True, True]  # old rows
    assert [skip_reason(r) for r in rows][1:] == ["downstream_tier", "downstream_tier"]
    assert skip_reason(rows[0]) != "downstream_tier"


def test_cli_names_clusters_and_mirror_directories(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from kafka_audit.cli import app

    monkeypatch.setenv("KAFKA_AUDIT_KAFKA_DIR", str(tmp_path / "kafka"))
    runner = CliRunner()
    out = runner.invoke(app, ["kafka", "status", "--name", "B"])
    assert out.exit_code == 1 and "kafka-B" in out.output.replace("\n", "")
    out = runner.invoke(app, ["mirror", "status", "--source", "A", "--target", "B"])
    assert out.exit_code == 1 and "mirror-A-B" in out.output.replace("\n", "")
    out = runner.invoke(app, ["mirror", "start", "--source", "A", "--target", "B", "-t", "orders"])
    assert out.exit_code == 2 and "kafka start --name A" in out.output.replace("\n", " ")
    MirrorMaker(tmp_path / "mirror-A-B", "A", "B", "x:1", "y:2")._save()
    out = runner.invoke(app, ["mirror", "status"])
    assert out.exit_code == 1 and "A->B" in out.output
    assert runner.invoke(app, ["mirror", "stop"]).exit_code == 0
