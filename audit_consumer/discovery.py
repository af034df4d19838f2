r"""Which topics an audit consumer audits: named ones, plus those matching patterns, minus internal ones.

Patterns are Python regular expressions matched against the whole topic name (``re.fullmatch``), so
``orders`` means the topic ``orders`` and ``orders\..*`` every topic below ``orders.`` (``.`` alone
matches any character: escape it to match a dot only). Topics matching a pattern
are found in the cluster's metadata (:meth:`confluent_kafka.Consumer.list_topics`) when the consumer
starts and every ``discovery_interval_ms``, so a topic created later is audited without a restart.

Internal topics are never matched by a pattern (a named topic is audited all the same): Kafka's own
(``__consumer_offsets``, ``__transaction_state``) and every topic starting with ``__`` (kafka-audit's
audit, state, dead-letter, results, alerts and control topics among them), MirrorMaker 2's and Kafka
Connect's internal topics (``mm2-*``, ``*.internal``, ``heartbeats`` and ``<source>.heartbeats``,
``connect-configs|offsets|status``), Confluent's (``_confluent*``, ``_schemas``), and the audit
consumer's own output topics whatever their names.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import cache

from kafka_plumbing.errors import ConfigError

INTERNAL_TOPIC_PATTERNS: tuple[str, ...] = (
    r"__.*",
    r"_schemas",
    r"_confluent.*",
    r"mm2-.*",
    r".*\.internal",
    r"(.+\.)?heartbeats",
    r"connect-(configs|offsets|status)",
)
"""Topics no pattern matches (Python regular expressions, whole name)."""


@cache
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def check_patterns(patterns: Iterable[str], what: str = "topic_patterns") -> list[str]:
    """Return ``patterns`` as a list once each compiles as a Python regular expression.

    Raises:
        ConfigError: naming ``what``, the pattern and the regex error.
    """
    out = []
    for p in patterns:
        try:
            _compiled(p)
        except re.error as exc:
            raise ConfigError(f"{what}: {p!r} is not a regular expression ({exc})") from None
        out.append(p)
    return out


def is_internal(topic: str, exclude: Iterable[str] = INTERNAL_TOPIC_PATTERNS) -> bool:
    """Return True if ``topic`` is internal (matches one of ``exclude`` as a whole)."""
    return any(_compiled(p).fullmatch(topic) for p in exclude)


def select_topics(
    available: Iterable[str],
    named: Iterable[str],
    patterns: Iterable[str],
    exclude: Iterable[str] = INTERNAL_TOPIC_PATTERNS,
    own: Iterable[str] = (),
) -> list[str]:
    """Return the topics to audit, sorted: every ``named`` one, plus the available ones a pattern matches.

    Args:
        available: Topic names in the cluster (metadata).
        named: Topics audited whatever their names (they need not exist yet).
        patterns: Python regular expressions matched against whole names.
        exclude: Internal topics no pattern matches (whole names); default :data:`INTERNAL_TOPIC_PATTERNS`.
        own: The consumer's own output topics (audit, state, dead letters): never matched either.
    """
    compiled = [_compiled(p) for p in patterns]
    own_set = set(own)
    exclude = tuple(exclude)
    matched = {
        t
        for t in available
        if t not in own_set and any(c.fullmatch(t) for c in compiled) and not is_internal(t, exclude)
    }
    return sorted(matched | set(named))
