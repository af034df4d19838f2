"""Property tests (issue 18 item 4): codec, stamp, reconciliation and alert state under arbitrary input.

* Codec: audit records, control records and window results round trip; any structurally mutated bytes
  (:mod:`testbed.fuzz`: tokens of the schema broken one by one) either decode to a valid record that
  encodes again to the same record, or raise :class:`~audit_record.MalformedRecordError` with a
  documented reason. Never anything else.
* Stamp: mutated stamps are rejected with :class:`~audit_record.stamp.MalformedStampError` only, and the
  audit consumer's counting loop dead-letters exactly the stamps the reference rejects.
* Reconciliation (the pure code the Spark job runs): the newest snapshot of each key wins whatever the
  arrival order; a final window never changes.
* Alerts: the state machine against a plain reference, and the engine under arbitrary sequences of
  window results (replays, provisional rows, gaps): firing and resolved strictly alternate per alert.
"""

from __future__ import annotations

import json
import math
import random
from collections import defaultdict
from typing import Any

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from testbed import fuzz

from alerts import AlertEngine, AlertSettings, AlertStatus
from alerts.event import AUDIT_LAG
from alerts.state_machine import AlertState, AlertStateMachine, Transition
from audit_consumer.counts import PartitionCounts, count_batch
from audit_record import (
    AuditRecord,
    ControlRecord,
    MalformedRecordError,
    NetworkStats,
    ProducerConfig,
    codec,
    decode,
    decode_control,
    encode,
    encode_control,
    window_result,
)
from audit_record.stamp import MalformedStampError, header
from audit_record.stamp import decode as decode_stamp
from audit_record.stamp import read as read_stamp
from spark_streaming.reconcile import compact, merge, reconcile
from spark_streaming.window_state import make_reconciler

PROPERTY = settings(
    max_examples=150,
    deadline=None,
    database=None,  # no .hypothesis directory in the working tree
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
RECORD_REASONS = {
    "empty",
    "bad_magic",
    "wrong_schema",
    "undecodable",
    "bad_tier",
    "bad_window",
    "negative_count",
    "inconsistent_counts",
    "bad_value",
}
"""The reasons :func:`audit_record.decode` documents."""
CONTROL_REASONS = {"empty", "bad_magic", "wrong_schema", "undecodable", "bad_control"}
OBJECT_REASONS = {"bad_magic", "wrong_schema", "undecodable"}

# ---------------------------------------------------------------------------------------------- inputs
finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
counts = st.integers(0, 1 << 62)
int32 = st.integers(-(1 << 31), (1 << 31) - 1)
names = st.text(min_size=1, max_size=20)
seeds = st.integers(0, 1 << 32).map(random.Random)
"""Random generators for the mutation engine (seeded: a failure is replayed from its seed)."""


@st.composite
def audit_records(draw: st.DrawFn) -> AuditRecord:
    """Any record :meth:`AuditRecord.validate` accepts (both tiers, optional parts or not, edge values)."""
    start = draw(st.integers(0, 1 << 50))
    sent = draw(counts)
    acked = draw(st.integers(0, sent))
    received = draw(counts)
    return AuditRecord(
        tier=draw(st.sampled_from(["producer"]) | names.map(lambda n: f"cluster:{n}")),
        source=draw(names),
        topic=draw(names),
        producer_id=draw(st.none() | names),
        partition=draw(int32),
        window_start_ms=start,
        window_end_ms=start + draw(st.integers(1, 1 << 40)),
        emitted_at_ms=draw(st.integers(-(1 << 62), 1 << 62)),
        record_id=draw(st.text(max_size=32)),
        host=draw(st.text(max_size=10)),
        final=draw(st.booleans()),
        sent=sent,
        acknowledged=acked,
        failed=draw(st.integers(0, sent - acked)),
        first_sequence=draw(st.none() | st.integers(0, (1 << 63) - 1)),
        received=received,
        unique=draw(st.integers(0, received)),
        duplicated=draw(st.integers(0, received)),
        late=draw(counts),
        bytes=draw(counts),
        latency_p99_ms=draw(st.none() | finite),
        producer_config=draw(
            st.none()
            | st.builds(
                ProducerConfig,
                acks=st.sampled_from(["0", "1", "all"]),
                enable_idempotence=st.booleans(),
                batch_num_messages=int32,
                linger_ms=finite,
                message_timeout_ms=int32,
                message_send_max_retries=int32,
                retry_backoff_ms=int32,
                poll_interval_ms=st.none() | finite,
            )
        ),
        network=draw(
            st.none()
            | st.builds(
                NetworkStats,
                rtt_avg_ms=st.none() | finite,
                tx_retries=st.integers(-(1 << 63), (1 << 63) - 1),
                tcp_retransmit_pct=st.none() | finite,
            )
        ),
    )


def control_records(rng: random.Random) -> ControlRecord:
    return ControlRecord(
        group=rng.choice(["g", "orders-producers"]),
        version=rng.randint(1, 1 << 40),
        acks=rng.choice(["0", "1", "all"]),
        batch_num_messages=rng.randint(1, 1_000_000),
        linger_ms=rng.uniform(0, 900_000),
        message_timeout_ms=rng.randint(0, 2_147_483_647),
        reason=rng.choice(["suggestion", "rollback"]),
        issued_at_ms=rng.randint(0, 1 << 42),
        producers=rng.choice([None, 3]),
        predicted_gamma_after=rng.choice([None, 0.93]),
        expires_at_ms=rng.choice([None, 1 << 41]),
    )


def result_row(rng: random.Random) -> dict[str, Any]:
    """A window result with every field set (from the schema's types) or null where nullable."""
    row: dict[str, Any] = {}
    for f in json.loads(codec.schema_json("window_result"))["fields"]:
        types = f["type"] if isinstance(f["type"], list) else [f["type"]]
        kind = next(t for t in types if t != "null")
        if "null" in types and rng.random() < 0.3:
            row[f["name"]] = None
        elif kind in ("long", "int"):
            row[f["name"]] = rng.randint(0, 1 << 30)
        elif kind == "double":
            row[f["name"]] = rng.random()
        elif kind == "boolean":
            row[f["name"]] = rng.random() < 0.5
        elif kind == "string":
            row[f["name"]] = rng.choice(["final", "t", "cluster:a"])
        else:  # arrays, records (added by later schema versions): their default
            row[f["name"]] = f.get("default")
    return row


def same_record(a: AuditRecord, b: AuditRecord) -> bool:
    return encode(a) == encode(b)


# ---------------------------------------------------------------------------------------------- codec
@PROPERTY
@given(audit_records())
def test_audit_records_round_trip(record: AuditRecord) -> None:
    assert decode(encode(record)) == record


@PROPERTY
@given(seeds, st.integers(1, 3))
def test_mutated_audit_records_decode_valid_or_raise_the_documented_error(
    rng: random.Random, rounds: int
) -> None:
    value = encode(fuzz.sample_record(rng))
    for _ in range(20):
        mutation, mutant = fuzz.mutate_object(rng, value, codec.schema_json("audit_record"), rounds)
        try:
            record = decode(mutant)
        except MalformedRecordError as exc:
            assert exc.reason in RECORD_REASONS, (mutation, mutant.hex())
            continue
        record.validate()
        again = decode(encode(record))  # what the codec reads it can write, and reads back the same
        assert same_record(again, record), (mutation, mutant.hex())


@PROPERTY
@given(seeds)
def test_mutated_control_records_decode_valid_or_raise_the_documented_error(rng: random.Random) -> None:
    record = control_records(rng)
    assert decode_control(encode_control(record)) == record
    for _ in range(20):
        mutation, mutant = fuzz.mutate_object(
            rng, encode_control(record), codec.schema_json("control_record"), rng.randint(1, 2)
        )
        try:
            got = decode_control(mutant)
        except MalformedRecordError as exc:
            assert exc.reason in CONTROL_REASONS, (mutation, mutant.hex())
            continue
        assert encode_control(decode_control(encode_control(got))) == encode_control(got)


@PROPERTY
@given(seeds)
def test_mutated_window_results_decode_or_raise_the_documented_error(rng: random.Random) -> None:
    row = result_row(rng)
    value = codec.encode_object(window_result.SCHEMA, row)
    assert codec.decode_object(window_result.SCHEMA, value) == row
    for _ in range(20):
        mutation, mutant = fuzz.mutate_object(
            rng, value, codec.schema_json(window_result.SCHEMA), rng.randint(1, 2)
        )
        try:
            got = codec.decode_object(window_result.SCHEMA, mutant)
        except MalformedRecordError as exc:
            assert exc.reason in OBJECT_REASONS, (mutation, mutant.hex())
            continue
        codec.encode_object(window_result.SCHEMA, got)  # the sink can write whatever a reader accepts


def _with_field(record: AuditRecord, path: str, raw: int | float) -> bytes:
    data = record.to_avro()
    part, _, name = path.rpartition(".")
    (data[part] if part else data)[name] = raw
    return fuzz.raw_single_object("audit_record", data) if isinstance(raw, float) else _int_body(data)


def _int_body(data: dict[str, Any]) -> bytes:
    """Write ``data`` with every int field as long: what fastavro's int reader then reads unchecked."""
    schema = json.loads(codec.schema_json("audit_record"))

    def widen(t: Any) -> Any:
        if t == "int":
            return "long"
        if isinstance(t, list):
            return [widen(x) for x in t]
        if isinstance(t, dict) and t.get("type") == "record":
            return {**t, "fields": [{**f, "type": widen(f["type"])} for f in t["fields"]]}
        if isinstance(t, dict) and t.get("type") == "array":
            return {**t, "items": widen(t["items"])}
        return t

    import io

    import fastavro

    buf = io.BytesIO()
    buf.write(codec.SINGLE_OBJECT_MAGIC + codec.fingerprint())
    fastavro.schemaless_writer(buf, fastavro.parse_schema(widen(schema)), data)
    return buf.getvalue()


@pytest.mark.parametrize(
    "path", ["partition", "producer_config.message_timeout_ms", "producer_config.batch_num_messages"]
)
@pytest.mark.parametrize("raw", [1 << 31, -(1 << 31) - 1, 260_037_399_504])
def test_regression_an_int_outside_32_bits_is_undecodable(path: str, raw: int) -> None:
    # Defect found by fuzzing: fastavro reads any 64-bit varint for an Avro int; such a record decoded,
    # then failed where it was written again (the Spark job's int columns, the results sink).
    record = fuzz.sample_record(random.Random(0))
    record.producer_config = ProducerConfig(
        acks="1",
        enable_idempotence=False,
        batch_num_messages=1,
        linger_ms=0.0,
        message_timeout_ms=1000,
        message_send_max_retries=2,
        retry_backoff_ms=100,
    )
    with pytest.raises(MalformedRecordError) as exc:
        decode(_with_field(record, path, raw))
    assert exc.value.reason == "undecodable" and "out of range" in exc.value.detail
    assert decode(_with_field(record, path, (1 << 31) - 1)) is not None  # the edge itself is fine


@pytest.mark.parametrize("path", ["latency_p99_ms", "network.rtt_avg_ms", "producer_config.linger_ms"])
@pytest.mark.parametrize("raw", [math.nan, math.inf, -math.inf])
def test_regression_a_nan_or_infinite_number_is_a_bad_value(path: str, raw: float) -> None:
    # Defect found by fuzzing: a NaN latency decoded as valid, and max() over a window's snapshots then
    # gave a result that depended on their order.
    record = fuzz.sample_record(random.Random(1))
    record.producer_config = ProducerConfig(
        acks="1",
        enable_idempotence=False,
        batch_num_messages=1,
        linger_ms=0.0,
        message_timeout_ms=1000,
        message_send_max_retries=2,
        retry_backoff_ms=100,
    )
    record.network = NetworkStats(rtt_avg_ms=1.0)
    with pytest.raises(MalformedRecordError) as exc:
        decode(_with_field(record, path, raw))
    assert exc.value.reason == "bad_value"
    assert decode(_with_field(record, path, 1.0)) is not None
    record.latency_p50_ms = raw
    with pytest.raises(MalformedRecordError, match="bad_value"):
        encode(record)  # nor is one written


# ---------------------------------------------------------------------------------------------- stamp
@PROPERTY
@given(seeds)
def test_mutated_stamps_are_rejected_cleanly_and_dead_lettered_by_the_consumer_loop(
    rng: random.Random,
) -> None:
    msgs, expected_bad = [], []
    for offset in range(30):
        pid, seq = rng.choice(["app@host.1.aa", "~00112233445566ff"]), rng.randrange(1 << 62)
        good = header(pid, seq)
        assert decode_stamp(*good) == (pid.encode(), seq)
        if rng.random() < 0.3:
            headers: list[tuple[str, bytes | None]] = [good]
        else:
            _, headers = fuzz.mutate_stamp(rng, good)
        try:
            read_stamp(headers)
            ok = True
        except MalformedStampError:
            ok = False  # the only error a malformed stamp may raise
        if not ok:
            expected_bad.append(offset)
        msgs.append(_Msg(offset, headers))
    parts = {("t", 0): PartitionCounts("t", 0, 5_000, 2_000)}
    dead: list[int] = []
    n = count_batch(
        msgs, parts, 10_000, {}, lambda _: None, lambda _: None, lambda m, r, d: dead.append(m.offset())
    )
    assert dead == expected_bad
    assert n == len(msgs) - len(dead)


class _Msg:
    def __init__(self, offset: int, headers: list[tuple[str, bytes | None]]) -> None:
        self._offset, self._headers = offset, headers

    def error(self) -> None:
        return None

    def topic(self) -> str:
        return "t"

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset

    def timestamp(self) -> tuple[int, int]:
        return (1, 1_000 + self._offset)

    def headers(self) -> list[tuple[str, bytes | None]]:
        return self._headers

    def value(self) -> bytes:
        return b"v"


# ------------------------------------------------------------------------------------------ reconciliation
W0, W1 = 1_800_000_000_000, 1_800_000_005_000


@st.composite
def snapshot_logs(draw: st.DrawFn) -> list[tuple[str, dict[str, Any]]]:
    """Snapshots of a few keys of one window, each key's in its own partition, offsets increasing."""
    out = []
    offset = 0
    for k in range(draw(st.integers(1, 5))):
        tier = draw(st.sampled_from(["producer", "cluster:a", "cluster:b", "consumer:g"]))
        pid = draw(st.sampled_from(["p1", "p2"]))
        part = k % 3
        sent = received = unique = 0
        for _ in range(draw(st.integers(1, 4))):
            offset += draw(st.integers(1, 3))
            grow = draw(st.integers(0, 50))
            sent, received = sent + grow, received + grow + draw(st.integers(0, 2))
            unique = min(received, unique + draw(st.integers(0, grow + 1)))
            record = AuditRecord(
                tier=tier,
                source=f"s{k}",
                topic="t",
                producer_id=pid,
                partition=k,
                window_start_ms=W0,
                window_end_ms=W1,
                emitted_at_ms=W1 + offset,
                sent=sent if tier == "producer" else 0,
                received=0 if tier == "producer" else received,
                unique=0 if tier == "producer" else unique,
                duplicated=0 if tier == "producer" else received - unique,
                latency_p99_ms=draw(st.none() | st.floats(0, 1e4)),
            )
            out.append((record.key(), compact(record, part, offset)))
    return out


def _reconciled(arrivals: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    state: dict[str, dict[str, Any]] = {}
    for key, snap in arrivals:
        merge(state, key, json.loads(json.dumps(snap)))
    return reconcile("t", W0, W1, state.values(), ["a"], window_result.FINAL)


@PROPERTY
@given(snapshot_logs(), seeds)
def test_newest_snapshot_wins_in_any_arrival_order(log: list, rng: random.Random) -> None:
    newest: dict[str, dict[str, Any]] = {}
    for key, snap in log:
        newest[key] = snap  # the log is in offset order per key
    shuffled = log + rng.sample(log, len(log) // 2)  # some arrive twice (a re-read batch)
    rng.shuffle(shuffled)
    state: dict[str, dict[str, Any]] = {}
    for key, snap in shuffled:
        merge(state, key, dict(snap))
    assert {k: s["order"] for k, s in state.items()} == {k: s["order"] for k, s in newest.items()}
    lag_free = [{k: v for k, v in r.items() if k != "tier_lag_ms"} for r in _reconciled(log)]
    assert [{k: v for k, v in r.items() if k != "tier_lag_ms"} for r in _reconciled(shuffled)] == lag_free
    # Interleavings that keep each key's own order (partitions read in any order): the same results,
    # the tier lag included.
    queues = defaultdict(list)
    for key, snap in log:
        queues[key].append((key, snap))
    interleaved = []
    while any(queues.values()):
        key = rng.choice([k for k, q in queues.items() if q])
        interleaved.append(queues[key].pop(0))
    assert _reconciled(interleaved) == _reconciled(log)


class FakeState:
    """The parts of pyspark's GroupState the reconciler uses (see tests/unit/test_spark_state.py)."""

    def __init__(self) -> None:
        self.value: Any = None
        self.timeout: int | None = None
        self.hasTimedOut = False
        self.watermark_ms = 0

    @property
    def exists(self) -> bool:
        return self.value is not None

    @property
    def get(self) -> Any:
        return self.value

    def update(self, value: Any) -> None:
        self.value = value

    def remove(self) -> None:
        self.value = None

    def setTimeoutTimestamp(self, ts: int) -> None:
        self.timeout = ts

    def getCurrentWatermarkMs(self) -> int:
        return self.watermark_ms


def _batch(items: list[tuple[str, dict[str, Any]]]) -> pd.DataFrame:
    return pd.DataFrame(
        [{"snap_key": k, "payload": json.dumps(s), "g_window_end": W1} for k, s in items],
        columns=["snap_key", "payload", "g_window_end"],
    )


@settings(PROPERTY, max_examples=60)
@given(snapshot_logs(), snapshot_logs(), seeds)
def test_a_final_window_never_changes(before: list, after: list, rng: random.Random) -> None:
    fn = make_reconciler(["a"], grace_ms=2_000)
    state = FakeState()
    cut = sorted(rng.sample(range(len(before) + 1), min(2, len(before) + 1)))
    for lo, hi in zip([0, *cut], [*cut, len(before)], strict=True):  # in a few micro-batches
        if hi > lo:
            list(fn(("t", W0), iter([_batch(before[lo:hi])]), state))
    state.hasTimedOut, state.watermark_ms = True, W1 + 2_001
    [final_frame] = list(fn(("t", W0), iter([]), state))
    final = final_frame.to_dict("records")
    assert all(r["state"] == "final" and r["kind"] == "result" for r in final)
    expected = _reconciled(before)
    assert [r["unique"] for r in final] == [r["unique"] for r in expected]
    assert [r["sent"] for r in final] == [r["sent"] for r in expected]
    # Whatever arrives later, newer snapshots included, is reported as late and never re-opens the window.
    state.hasTimedOut = False
    late_total = 0
    for key, snap in after:
        newer = {**snap, "order": [snap["order"][0], snap["order"][1] + 10_000]}
        for frame in fn(("t", W0), iter([_batch([(key, newer)])]), state):
            rows = frame.to_dict("records")
            assert [r["kind"] for r in rows] == ["late"]
            late_total += rows[0]["late"]
    assert late_total == len(after)
    state.hasTimedOut = True  # the tombstone expires: nothing more is emitted, the state goes
    assert list(fn(("t", W0), iter([]), state)) == [] and not state.exists


# ---------------------------------------------------------------------------------------------- alerts
def reference_transitions(observations: list[bool | None], for_count: int, keep: int) -> list[str | None]:
    """What the state machine must emit, written plainly: fire on the for_count-th bad in a row (unknowns
    skipped) while not firing; resolve on the keep-th good in a row while firing."""
    out: list[str | None] = []
    firing, bad_run, good_run = False, 0, 0
    for obs in observations:
        emitted = None
        if obs is not None:
            if firing:
                good_run = 0 if obs else good_run + 1
                if good_run == keep:
                    firing, good_run, bad_run, emitted = False, 0, 0, "resolve"
            else:
                bad_run = bad_run + 1 if obs else 0
                if bad_run == for_count:
                    firing, bad_run, good_run, emitted = True, 0, 0, "fire"
        out.append(emitted)
    return out


@PROPERTY
@given(
    st.lists(st.sampled_from([True, False, None]), max_size=60),
    st.integers(1, 4),
    st.integers(1, 4),
)
def test_alert_state_machine_matches_the_reference(
    observations: list[bool | None], for_count: int, keep: int
) -> None:
    machine = AlertStateMachine(for_count, keep)
    got = []
    for obs in observations:
        before = machine.state
        t = machine.step(obs)
        got.append(t.value if t else None)
        if obs is None:
            assert machine.state is before
        assert machine.state is not AlertState.PENDING or for_count > 1
        assert (machine.state is AlertState.FIRING) == (
            [x for x in got if x][-1:] == ["fire"]
        )  # firing iff the last transition was FIRE
    assert got == reference_transitions(observations, for_count, keep)
    transitions = [x for x in got if x]
    assert transitions == ["fire", "resolve"] * (len(transitions) // 2) + ["fire"] * (len(transitions) % 2)
    assert Transition.FIRE.value == "fire"


@st.composite
def result_sequences(draw: st.DrawFn) -> list[list[dict[str, Any]]]:
    """Micro-batches of window results of two (topic, tier)s: good or bad final windows, provisional
    rows, gaps, replays of a whole earlier batch and rows missing a field."""
    batches: list[list[dict[str, Any]]] = []
    next_window = {("t", "cluster:a"): 0, ("u", "cluster:a"): 0}
    for _ in range(draw(st.integers(1, 25))):
        if batches and draw(st.integers(0, 7)) == 0:
            batches.append(list(draw(st.sampled_from(batches))))  # a re-run micro-batch
            continue
        batch = []
        for key in draw(st.lists(st.sampled_from(sorted(next_window)), max_size=3, unique=True)):
            i = next_window[key] = next_window[key] + draw(st.integers(1, 2))
            state = draw(st.sampled_from(["final", "final", "provisional"]))
            completeness = draw(st.sampled_from([1.0, 0.5, None]))
            gamma = draw(st.sampled_from([0.95, 0.5, None]))
            batch.append(
                {
                    "kind": "result",
                    "topic": key[0],
                    "tier": key[1],
                    "state": state,
                    "window_start_ms": W0 + i * 5_000,
                    "window_end_ms": W0 + (i + 1) * 5_000,
                    "sent": 100,
                    "unique": None if completeness is None else int(100 * completeness),
                    "duplicated": 0,
                    "producers": 1,
                    "unaudited": 0,
                    "unaudited_producers": draw(st.sampled_from([0, 0, 1])),
                    "completeness": completeness,
                    "loss_rate": None if completeness is None else 1 - completeness,
                    "duplicate_rate": 0.0,
                    "gamma_actual": gamma,
                    "gamma_predicted": gamma,
                    "gamma_target": 0.9,
                    "p_loss": draw(st.sampled_from([0.0, 0.5, None])),
                    "p_loss_lo": 0.0,
                    "p_loss_hi": 0.01,
                    "model_calibrated": True,
                    "final_wait_ms": 2_000,
                }
            )
        if draw(st.integers(0, 9)) == 0:
            batch.append({"kind": "result", "topic": "t"})  # missing fields: skipped, never a crash
        batches.append(batch)
    return batches


@PROPERTY
@given(result_sequences(), st.integers(1, 3), st.integers(1, 3))
def test_alert_engine_fires_and_resolves_in_turn_under_any_results(
    batches: list[list[dict[str, Any]]], for_count: int, keep: int
) -> None:
    engine = AlertEngine(
        AlertSettings(
            gamma_for_windows=for_count,
            gamma_keep_firing_windows=keep,
            drift_windows=for_count,
            drift_keep_firing_windows=keep,
            grace_ms=2_000,
            audit_lag_margin_ms=5_000,
        )
    )
    status: dict[tuple[str, str, str], AlertStatus] = {}
    now = W0 + 100_000
    judged: set[tuple[str, int]] = set()
    for batch in batches:
        now += 5_000
        events = engine.observe(batch, now)
        for e in events:
            key = (e.alertname, e.topic, e.tier)
            previous = status.get(key, AlertStatus.RESOLVED)
            assert e.status != previous, f"{key}: {previous} twice"
            status[key] = e.status
            if e.status is AlertStatus.RESOLVED:
                assert e.ends_at_ms is not None and e.ends_at_ms >= e.starts_at_ms
        new_finals = {
            (r["topic"], r["window_start_ms"]) for r in batch if r.get("state") == "final" and "tier" in r
        }
        if new_finals and new_finals <= judged:  # only windows judged before: a replay changes nothing
            window_events = [e for e in events if e.alertname != AUDIT_LAG]
            assert window_events == []
        judged |= new_finals
    firing = {(e.alertname, e.topic, e.tier) for e in engine.firing()}
    assert firing == {k for k, s in status.items() if s is AlertStatus.FIRING}
    restored = AlertEngine(engine.settings)
    restored.restore(json.loads(json.dumps(engine.to_state())))
    assert restored.states() == engine.states()


def test_regression_a_dead_letter_has_no_event_time_so_the_watermark_never_drops_it() -> None:
    # Defect found by the live fuzz run: a malformed audit record with an old CreateTime was older than
    # the watermark, so Spark's stateful step dropped it: neither dead-lettered nor counted.
    from spark_streaming.decode import HEARTBEAT_KEY, decode_batches

    old, now = pd.Timestamp(0, unit="ms"), pd.Timestamp(W1, unit="ms")
    good = AuditRecord(tier="producer", source="s", topic="t", window_start_ms=W0, window_end_ms=W1)
    src = pd.DataFrame(
        {
            "key": [b"k", b"k", HEARTBEAT_KEY],
            "value": [b"\xc3\x01garbage", encode(good), b""],
            "partition": [0, 0, 1],
            "offset": [1, 2, 3],
            "timestamp": [old, now, now],
        }
    )
    [decoded] = list(decode_batches(iter([src])))
    assert list(decoded["kind"]) == ["dead_letter", "snapshot", "heartbeat"]
    assert pd.isna(decoded["event_time"].iloc[0])  # null: never late, never moves the watermark
    assert list(decoded["event_time"].iloc[1:]) == [now, now]
