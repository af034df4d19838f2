"""Experiment grids: sweep L, D, M, B, acks, ``message.timeout.ms`` and the polling interval.

A grid file (YAML) names fixed settings and the features to sweep; every combination (times
``repeats``) is one experiment: N messages from one audited producer in the impaired namespace, then
the verifier's ground truth. Each experiment appends one row to a CSV with exactly the columns of
``predictor/base_data/wu2020/experiments.csv`` (:data:`CSV_COLUMNS`), so both train the predictor together.
Re-running the same grid into the same CSV skips the experiments already there (resumable).

Example::

    name: batch-pktloss
    messages: 20000
    repeats: 1
    fixed: {delay_ms: 30, message_size_bytes: 100, message_timeout_ms: 5000, poll_interval_ms: 0.5}
    sweep:
      packet_loss_pct: [0, 5, 10, 15, 20, 25]
      batch_num_messages: [1, 2, 4, 8]
      acks: [0, 1]
"""

from __future__ import annotations

import csv
import itertools
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from audit_record import canonical_acks
from kafka_plumbing.errors import ConfigError, config_error
from predictor.features import BASE_FEATURES as MODEL_FEATURES
from predictor.features import current_name
from testbed.impairment import BernoulliLoss, Delay, Impairment
from testbed.netns import DEFAULT_CONGESTION_CONTROL

if TYPE_CHECKING:
    from testbed.lab import Lab

CSV_COLUMNS = (
    "experiment",
    *MODEL_FEATURES,
    "retries",
    "retry_backoff_ms",
    "buffer_max_kbytes",
    "buffer_max_ms",
    "n_sent",
    "n_received",
    "n_unique",
    "n_lost",
    "p_loss",
    "n_duplicated",
    "p_dup",
    "duration_s",
)
"""The shared data's columns (the predictor's features first), with ``batch_size`` renamed
``batch_num_messages``: files with the former name still read (:func:`predictor.features.current_name`)."""
FEATURES = CSV_COLUMNS[1 : CSV_COLUMNS.index("n_sent")]
"""Settings of one experiment: the CSV's columns up to ``n_sent``.

Units as in ``predictor/base_data/wu2020/README.md``."""

DEFAULTS: dict[str, float] = {
    "acks": 1,
    "packet_loss_pct": 0.0,
    "delay_ms": 30.0,
    "message_size_bytes": 100,
    "batch_num_messages": 1,
    "message_timeout_ms": 5000,
    "poll_interval_ms": 0.5,
    "retries": 2,
    "retry_backoff_ms": 100,
    "buffer_max_kbytes": 1048576,
    "buffer_max_ms": 0.5,
}
"""The paper's batch-pktloss settings (Sec. V, ``experiments.csv``), except the polling interval: our
Python producer on a shared 2-core machine cannot keep a zero-interval source below ``message.timeout.ms``
of queueing, so grids default to 0.5 ms (2,000 messages/s)."""


class GridSpec(BaseModel):
    """A grid file.

    Attributes:
        name: Written to the CSV's ``experiment`` column.
        messages: N messages per experiment (the paper used 1,000,000).
        repeats: Experiments per combination.
        fixed: Settings (:data:`FEATURES` names) for every experiment; the rest come from :data:`DEFAULTS`.
        sweep: Feature -> list of values; the grid is their Cartesian product.
        jitter_ms: Delay jitter sigma, ms (0: constant delay D).
        distribution: Delay distribution when jittered (``pareto``, ``normal``, ``uniform``).
        window_ms: Audit window, ms.
        congestion_control: TCP congestion control of the producer's namespace (the paper's testbed ran
            Linux's default, ``cubic``; see :data:`testbed.netns.DEFAULT_CONGESTION_CONTROL`).
        warmup_messages: Messages sent unimpaired with ``batch.num.messages`` = 1 before the first
            experiment, so the brokers' JIT has compiled the request path (cold brokers serve ~2x fewer
            requests/s and would skew the first experiments).
    """

    model_config = ConfigDict(extra="forbid")

    name: str
    messages: int = Field(20_000, gt=0)
    repeats: int = Field(1, gt=0)
    fixed: dict[str, float] = Field(default_factory=dict)
    sweep: dict[str, list[float]] = Field(default_factory=dict)
    jitter_ms: float = Field(0.0, ge=0.0)
    distribution: str = "pareto"
    window_ms: int = Field(10_000, gt=0)
    congestion_control: str = DEFAULT_CONGESTION_CONTROL
    warmup_messages: int = Field(60_000, ge=0)

    @field_validator("fixed", "sweep")
    @classmethod
    def _known(cls, v: dict[str, Any]) -> dict[str, Any]:
        v = {current_name(k): x for k, x in v.items()}  # a grid file written before a feature rename
        unknown = sorted(set(v) - set(FEATURES))
        if unknown:
            raise ValueError(f"unknown feature(s) {unknown}; allowed: {', '.join(FEATURES)}")
        return v

    def points(self) -> Iterator[tuple[dict[str, float], int]]:
        """Every (settings, repeat index) of the grid, in a fixed order."""
        keys = list(self.sweep)
        for values in itertools.product(*(self.sweep[k] for k in keys)):
            settings = {**DEFAULTS, **self.fixed, **dict(zip(keys, values, strict=True))}
            for r in range(self.repeats):
                yield settings, r

    @property
    def size(self) -> int:
        """Number of experiments."""
        n = self.repeats
        for v in self.sweep.values():
            n *= len(v)
        return n


def load_grid(path: Path) -> GridSpec:
    """Read a grid YAML file.

    Raises:
        ConfigError: naming the file and the bad key.
    """
    try:
        data = yaml.safe_load(Path(path).read_text())
        return GridSpec.model_validate(data)
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: {exc}") from exc
    except ValidationError as exc:
        raise config_error(exc, str(path)) from None


def point_key(name: str, settings: dict[str, float], repeat: int) -> tuple[str, ...]:
    """Identity of an experiment in a CSV (experiment name, settings, repeat), for resuming."""
    return (name, *(f"{float(settings[k]):g}" for k in FEATURES), str(repeat))


def done_keys(csv_path: Path) -> dict[tuple[str, ...], int]:
    """Experiments already in ``csv_path``: key without repeat -> how many rows."""
    out: dict[tuple[str, ...], int] = {}
    if not csv_path.exists():
        return out
    with csv_path.open(newline="") as f:
        for read in csv.DictReader(f):
            row = {current_name(k): v for k, v in read.items()}
            key = (row["experiment"], *(f"{float(row[k]):g}" for k in FEATURES))
            out[key] = out.get(key, 0) + 1
    return out


def librdkafka_config(settings: dict[str, float]) -> dict[str, Any]:
    """Return the producer properties of one experiment (librdkafka names)."""
    return {
        "acks": canonical_acks(settings["acks"]),
        "batch.num.messages": int(settings["batch_num_messages"]),
        "message.timeout.ms": int(settings["message_timeout_ms"]),
        "message.send.max.retries": int(settings["retries"]),
        "retry.backoff.ms": int(settings["retry_backoff_ms"]),
        "queue.buffering.max.kbytes": int(settings["buffer_max_kbytes"]),
        "linger.ms": float(settings["buffer_max_ms"]),
    }


def impairment(
    settings: dict[str, float], jitter_ms: float = 0.0, distribution: str = "pareto"
) -> Impairment:
    """Return the network of one experiment: delay D (+ jitter) and Bernoulli loss L."""
    return Impairment(
        delay=Delay(delay_ms=settings["delay_ms"], jitter_ms=jitter_ms, distribution=distribution),  # type: ignore[arg-type]
        loss=BernoulliLoss(percent=settings["packet_loss_pct"]),
    )


def csv_row(
    name: str, settings: dict[str, float], sent: int, received: int, unique: int, seconds: float
) -> dict[str, Any]:
    """One CSV row in the columns and units of ``predictor/base_data/wu2020/experiments.csv``.

    P_l, P_d as fractions.
    """
    lost = max(0, sent - unique)
    dup = received - unique
    row: dict[str, Any] = {"experiment": name}
    for k in FEATURES:
        v = settings[k]
        row[k] = int(v) if float(v).is_integer() else v
    row.update(
        n_sent=sent,
        n_received=received,
        n_unique=unique,
        n_lost=lost,
        p_loss=lost / sent if sent else 0.0,
        n_duplicated=dup,
        p_dup=dup / sent if sent else 0.0,
        duration_s=round(seconds, 3),
    )
    return row


def append_row(csv_path: Path, row: dict[str, Any]) -> None:
    """Append ``row`` (header first if the file is new); flushed, so an interrupt loses nothing done."""
    csv_path.parent.mkdir(parents=True, exist_ok=True)
    new = not csv_path.exists() or csv_path.stat().st_size == 0
    with csv_path.open("a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        if new:
            w.writeheader()
        w.writerow(row)


def run_grid(
    spec: GridSpec,
    csv_path: Path,
    lab: Lab,
    on_start: Callable[[int, int], None] | None = None,
    on_done: Callable[[dict[str, Any]], None] | None = None,
) -> int:
    """Run every experiment of ``spec`` not yet in ``csv_path``; append one row each.

    Args:
        spec: The grid.
        csv_path: Output CSV (columns :data:`CSV_COLUMNS`); existing rows of this grid are skipped.
        lab: Namespace + cluster to run in.
        on_start: Called once with (experiments to run, already done).
        on_done: Called with each new row.

    Returns:
        Experiments run now.

    Raises:
        LabError, VerifyError, NetworkError: if an experiment cannot be run or verified.
    """
    from testbed.producer_process import ProducerRun

    done = done_keys(csv_path)
    todo = []
    for settings, repeat in spec.points():
        key = point_key(spec.name, settings, repeat)[:-1]
        if done.get(key, 0) > 0:
            done[key] -= 1
            continue
        todo.append((settings, repeat))
    if on_start is not None:
        on_start(len(todo), spec.size - len(todo))
    if todo and spec.warmup_messages:  # warm up the brokers' request path (leaders, JIT) unimpaired
        lab.apply(impairment({**DEFAULTS, "delay_ms": 0.0}))
        warm = lab.topic(f"testbed.{spec.name}.warmup.{uuid.uuid4().hex[:8]}")
        config = {"acks": "1", "batch.num.messages": 1, "linger.ms": 0}
        for first in range(0, spec.warmup_messages, 20_000):
            lab.produce(
                ProducerRun(
                    bootstrap_servers=lab.bootstrap_servers,
                    topic=warm,
                    config=config,
                    count=min(20_000, spec.warmup_messages - first),
                    window_ms=spec.window_ms,
                )
            )
        lab.delete_topic(warm)
    for i, (settings, _repeat) in enumerate(todo):
        lab.apply(impairment(settings, spec.jitter_ms, spec.distribution))
        topic = lab.topic(f"testbed.{spec.name}.{uuid.uuid4().hex[:12]}")
        run = ProducerRun(
            bootstrap_servers=lab.bootstrap_servers,
            topic=topic,
            config=librdkafka_config(settings),
            message_bytes=int(settings["message_size_bytes"]),
            poll_interval_ms=float(settings["poll_interval_ms"]),
            count=spec.messages,
            window_ms=spec.window_ms,
            client_id=f"testbed-grid-{i}",
            seed=i,
        )
        outcome = lab.produce(run)
        lab.truth(topic, spec.window_ms, [outcome])
        row = csv_row(spec.name, settings, outcome.sent, outcome.received, outcome.unique, outcome.seconds)
        append_row(csv_path, row)
        lab.delete_topic(topic)
        if on_done is not None:
            on_done(row)
    return len(todo)
