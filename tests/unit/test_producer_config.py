import json

import numpy as np
import pytest

from audit_producer.librdkafka_config import reliability_config
from audit_producer.network_stats import parse_statistics
from audit_producer.workloads import message_pool
from audit_record import canonical_acks
from audit_record.rates import completeness, duplicate_rate, loss_rate
from kafka_plumbing.errors import ConfigError
from predictor.features import acks_number


def test_defaults_and_aliases_follow_librdkafka():
    c = reliability_config(
        {"request.required.acks": 1, "queue.buffering.max.ms": 20, "retries": 3, "delivery.timeout.ms": 500},
        poll_interval_ms=2.0,
    )
    assert (c.acks, c.linger_ms, c.message_send_max_retries, c.message_timeout_ms) == ("1", 20.0, 3, 500)
    assert (c.batch_num_messages, c.retry_backoff_ms, c.enable_idempotence, c.poll_interval_ms) == (
        10000,
        100,
        False,
        2.0,
    )
    assert reliability_config({}).acks == "all"
    assert reliability_config({"enable.idempotence": "true", "acks": "1"}).acks == "all"


def test_bad_acks_names_the_key_and_the_allowed_values():
    with pytest.raises(ConfigError, match=r"acks='2'.*0, 1, all, -1"):
        reliability_config({"acks": "2"})


@pytest.mark.parametrize(
    ("value", "canonical", "zero_one"),
    [
        ("0", "0", 0),
        (0, "0", 0),
        ("1", "1", 1),
        (1, "1", 1),
        (1.0, "1", 1),
        (" ALL ", "all", 1),
        ("all", "all", 1),
        ("-1", "all", 1),
        (-1, "all", 1),
        (np.int64(0), "0", 0),
    ],
)
def test_acks_has_one_canonical_form_and_the_predictor_derives_its_0_1(value, canonical, zero_one):
    assert canonical_acks(value) == canonical
    assert reliability_config({"acks": value}).acks == canonical
    assert acks_number(value) == zero_one


@pytest.mark.parametrize("value", ["2", 2, "one", "", None, True, 0.5, float("nan"), "1.0"])
def test_every_acks_reader_rejects_the_same_values(value):
    for read in (canonical_acks, acks_number, lambda v: reliability_config({"acks": v})):
        with pytest.raises(ConfigError, match=r"acks=.*allowed values are 0, 1, all, -1"):
            read(value)


def test_statistics_are_reduced_to_network_stats_in_ms():
    doc = {
        "brokers": {
            "b1": {
                "nodeid": 1,
                "rtt": {"avg": 2000, "p99": 9000, "cnt": 5},
                "txretries": 2,
                "req_timeouts": 1,
                "txerrs": 0,
            },
            "b2": {
                "nodeid": 2,
                "rtt": {"avg": 4000, "p99": 5000, "cnt": 5},
                "txretries": 1,
                "req_timeouts": 0,
                "txerrs": 3,
            },
            "boot": {"nodeid": -1, "rtt": {"avg": 999999, "cnt": 1}, "txretries": 100},
        }
    }
    s = parse_statistics(json.dumps(doc))
    assert (s.rtt_avg_ms, s.rtt_p99_ms, s.tx_retries, s.request_timeouts, s.tx_errors) == (3.0, 9.0, 3, 1, 3)
    assert parse_statistics("not json").rtt_avg_ms is None


def test_workload_profiles_have_the_papers_sizes():
    weblog = message_pool("weblog", 500)
    assert 150 <= sum(map(len, weblog)) / len(weblog) <= 260
    assert all(b'HTTP/1.1"' in v for v in weblog)
    assert max(map(len, message_pool("game", 500))) < 100
    assert all(40 <= len(v) <= 280 for v in message_pool("social", 500))
    assert {len(v) for v in message_pool("game", 50, message_bytes=100)} == {100}
    assert message_pool("game", 10, seed=1) == message_pool("game", 10, seed=1)
    with pytest.raises(ValueError, match="allowed are social, weblog, game"):
        message_pool("video", 1)  # type: ignore[arg-type]


def test_rates_match_eq3_over_a_window():
    assert loss_rate(100, 90) == 0.1 and duplicate_rate(100, 5) == 0.05 and completeness(100, 90) == 0.9
    assert loss_rate(0, 0) is None and duplicate_rate(0, 1) is None and completeness(0, 0) is None
    assert loss_rate(10, 12) == 0.0 and completeness(10, 12) == 1.0
