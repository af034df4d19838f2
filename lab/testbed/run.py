"""Run a scenario in the lab: impaired producers, the audit pipeline, and the verifier's ground truth.

``kafka-audit testbed run SCENARIO`` = :func:`run_scenario`: start the lab (3 brokers), the exactly-once
audit consumer and (unless disabled) the Spark reconciliation job in the root namespace; run the
scenario's stages (one producer process per stage in the impaired namespace); then wait until every
window of the load is final and compare, window by window, the audit pipeline's R_l and R_d with the
verifier's (which reads every message's stamp). Results: ``stages.json`` (per stage: configuration,
network, sent / unique / duplicated from the verifier, R_l, R_d) and ``windows.csv`` (per window:
audit pipeline vs verifier, with the job's prediction and the model version that made it) in the
output directory.

With :class:`ModelLifecycle` (``kafka-audit testbed run --retrain``) the job also fills a training
store and retrains in the background into a model registry; both live outside the (wiped) work
directory, so scenario after scenario trains the same registry and a later run is served by its
champion.
"""

from __future__ import annotations

import csv
import json
import math
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from audit_consumer.ground_truth import totals_by_window
from kafka_plumbing.errors import ConfigError, KafkaAuditError
from testbed.lab import Lab, ProducerOutcome, stop_quietly
from testbed.producer_process import ProducerRun
from testbed.scenario import Scenario, Stage

CLUSTER = "testbed"


@dataclass
class StageResult:
    """One stage's outcome (ground truth from the verifier).

    Attributes:
        name: Stage name.
        network: NetEm-like description of the impairment.
        config: librdkafka properties of the stage's producer.
        producer_id: The stage producer's audit id.
        sent, unique, received, duplicated, lost: Messages (verifier).
        loss_rate: R_l, fraction. duplicate_rate: R_d, fraction.
        seconds: Producer wall time, s.
        not_handed_over: Messages the load could not hand to the producer in time (counted as lost in
            ``offered_loss_rate``).
        offered_loss_rate: R_l of the offered load, fraction (issue 14 item 4).
        config_events: The autotuned producer's configuration events (``--control apply``).
        max_producers: The most producers the stage's load ran at once (a ``producers`` hint).
    """

    name: str
    network: str
    config: dict[str, Any]
    producer_id: str
    sent: int
    received: int
    unique: int
    duplicated: int
    lost: int
    loss_rate: float
    duplicate_rate: float
    seconds: float
    not_handed_over: int = 0
    offered_loss_rate: float = 0.0
    config_events: list[dict[str, Any]] = field(default_factory=list)
    max_producers: int = 1


@dataclass
class WindowComparison:
    """One window: the audit pipeline's numbers next to the verifier's.

    Attributes:
        window_start_ms: Window start (epoch ms).
        sent: Messages the producers sent in the window (their audit snapshots).
        truth_loss_rate, truth_duplicate_rate: Verifier's R_l, R_d (fractions).
        audit_loss_rate, audit_duplicate_rate: Spark job's final R_l, R_d (None without Spark).
        audit_late: Messages of the window the audit consumer read after the window was final (counted
            as late, not as received; the verifier counts them): non-zero explains a difference.
        p_loss: Predicted P_l of the final window, if the job predicted one.
        gamma_actual: KPI gamma from R_l, R_d, if the job computed it.
        model_version: Version of the model that predicted ``p_loss`` (``shipped``, ``v0001``...).
        model_calibrated: Whether that model counted as calibrated for this deployment then.
        packet_loss_pct_est: The window's L as the job estimated it (TCP retransmission ratio, percent).
        delay_ms_est: The window's D as the job estimated it (smallest broker RTT, ms).
        tx_retries: librdkafka request retries of the window's producers (``txretries``; cumulative since
            each producer started, the newest sample), requests.
        request_timeouts: librdkafka requests that timed out (``req_timeouts``; cumulative, the same way).
        tcp_timeout_pct_est: The producers' TCP retransmission timeouts per 100 segments sent in the
            window, as the job estimated it (percent; loss bursts read high, random loss low).
    """

    window_start_ms: int
    sent: int
    truth_loss_rate: float
    truth_duplicate_rate: float
    audit_loss_rate: float | None = None
    audit_duplicate_rate: float | None = None
    audit_late: int | None = None
    p_loss: float | None = None
    gamma_actual: float | None = None
    model_version: str | None = None
    model_calibrated: bool | None = None
    packet_loss_pct_est: float | None = None
    delay_ms_est: float | None = None
    tx_retries: int | None = None
    request_timeouts: int | None = None
    tcp_timeout_pct_est: float | None = None

    @property
    def exact(self) -> bool:
        """True if the audit pipeline's R_l and R_d equal the verifier's exactly."""
        return (self.audit_loss_rate, self.audit_duplicate_rate) == (
            self.truth_loss_rate,
            self.truth_duplicate_rate,
        )


@dataclass(frozen=True)
class ModelLifecycle:
    """Retraining in the scenario's Spark job (``SparkJobSettings`` model-lifecycle keys).

    Attributes:
        registry_dir: Model registry (kept across runs).
        training_dir: Training store (kept across runs).
        retrain: Retrain in the background (else only store windows and serve the registry's champion).
        retrain_every_windows: New stored windows that start a retraining.
        retrain_min_windows: Fewest new windows for the timed retraining, and the retraining's minimum.
        training_min_messages: Fewest messages for a window to be stored.
        retrain_data: Base CSVs beside the paper's (testbed grids).
        wait_for_retrain_s: After the last window is final, wait this long for a running retraining
            to finish (its decision recorded) before stopping the job, s.
    """

    registry_dir: Path
    training_dir: Path
    retrain: bool = True
    retrain_every_windows: int = 200
    retrain_min_windows: int = 50
    training_min_messages: int = 500
    retrain_data: tuple[Path, ...] = ()
    wait_for_retrain_s: float = 0.0

    def job_settings(self) -> dict[str, Any]:
        """Return the ``SparkJobSettings`` keywords."""
        return {
            "model_registry_dir": self.registry_dir,
            "training_dir": self.training_dir,
            "retrain": self.retrain,
            "retrain_every_windows": self.retrain_every_windows,
            "retrain_min_windows": self.retrain_min_windows,
            "training_min_messages": self.training_min_messages,
            "retrain_data": list(self.retrain_data),
        }


@dataclass
class ScenarioResult:
    """Everything a scenario run produced."""

    scenario: str
    variant: str
    topic: str
    stages: list[StageResult] = field(default_factory=list)
    windows: list[WindowComparison] = field(default_factory=list)
    control: str = "off"
    decisions: list[dict[str, Any]] = field(default_factory=list)

    def totals(self) -> dict[str, float]:
        """Return whole-run offered, sent, lost (incl. not handed over), duplicated; R_l, R_d (fractions)."""
        offered = sum(s.sent + s.not_handed_over for s in self.stages)
        lost = sum(s.lost + s.not_handed_over for s in self.stages)
        dup = sum(s.duplicated for s in self.stages)
        return {
            "offered": offered,
            "sent": sum(s.sent for s in self.stages),
            "lost": lost,
            "duplicated": dup,
            "loss_rate": lost / offered if offered else 0.0,
            "duplicate_rate": dup / offered if offered else 0.0,
        }

    def write(self, out_dir: Path) -> None:
        """Write ``stages.json`` and ``windows.csv`` into ``out_dir``."""
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "stages.json").write_text(
            json.dumps(
                {
                    "scenario": self.scenario,
                    "variant": self.variant,
                    "topic": self.topic,
                    "control": self.control,
                    "totals": self.totals(),
                    "stages": [asdict(s) for s in self.stages],
                    "decisions": self.decisions,
                },
                indent=2,
            )
        )
        with (out_dir / "windows.csv").open("w", newline="") as f:
            names = [*WindowComparison.__dataclass_fields__, "exact"]
            w = csv.DictWriter(f, fieldnames=names)
            w.writeheader()
            for row in self.windows:
                w.writerow({**asdict(row), "exact": row.exact})


def run_scenario(
    scenario: Scenario,
    lab: Lab,
    variant: str = "default",
    spark: bool = True,
    work_dir: Path = Path("var/testbed/run"),
    log: Callable[[str], None] = print,
    final_timeout_s: float = 300.0,
    lifecycle: ModelLifecycle | None = None,
    control: str = "off",
    warmup_s: float = 0.0,
) -> ScenarioResult:
    """Run ``scenario`` in ``lab`` and compare the audit pipeline with the verifier.

    Args:
        scenario: The scenario.
        lab: Namespace + cluster.
        variant: Producer configuration variant (``default`` or a key of ``scenario.variants``).
        spark: Also run the Spark reconciliation job and compare its final windows.
        work_dir: Spark checkpoint and Parquet directory.
        log: Progress messages.
        final_timeout_s: Deadline for every window to be final after the load, s.
        lifecycle: Training store, registry and retraining of the Spark job (None: the job's defaults
            inside ``work_dir``, no retraining).
        control: The job's control loop (``off``, ``advise``, ``apply``; ``control_loop``): in ``apply``
            the stage producers are autotuned (group ``testbed-<scenario>``) and follow its changes; the
            offered load stays the scenario's (hints on the polling interval are not followed).
        warmup_s: Seconds of unaudited load with the first stage's configuration and offered rate,
            from the root namespace (not through the impaired link), to a separate topic, before the
            first stage (:mod:`testbed.warmup`: a fresh cluster's brokers append slowly until their JVMs
            have compiled the produce path); 0 = none.

    Raises:
        ConfigError: for an unknown variant.
        LabError, NetworkError, VerifyError: if a part fails.
    """
    from audit_consumer.consumer import AuditConsumer
    from audit_consumer.settings import AuditConsumerSettings

    topic = lab.topic(scenario.topic)
    for stage in scenario.stages:  # validate every stage before starting anything
        scenario.stage_config(stage, variant)
    stop = threading.Event()
    consumer = AuditConsumer(
        AuditConsumerSettings(
            cluster=CLUSTER,
            topics=[topic],
            bootstrap_servers=lab.bootstrap_servers,
            window_ms=scenario.window_ms,
            grace_ms=scenario.grace_ms,
            delivery_margin_ms=scenario.delivery_margin_ms,
            max_final_wait_ms=scenario.max_final_wait_ms,
            audit_topic=lab.audit_topic,
            instance_id=f"testbed-{scenario.name}",
        )
    )
    consumer_thread = threading.Thread(target=consumer.run, args=(stop,), name="audit-consumer", daemon=True)
    consumer_thread.start()
    job = None
    finals: dict[tuple[str, int, str], dict[str, Any]] = {}
    result = ScenarioResult(scenario.name, variant, topic, control=control)
    if control != "off" and not spark:
        raise ConfigError(f"control={control!r} needs the Spark job (allowed without it: off)")
    if spark:
        job = _start_job(lab, scenario, work_dir, finals, lifecycle, control, result.decisions)
        serving = job.live_model.serving.version if job.live_model.serving else "-"
        log(f"Spark reconciliation job running (model {serving}, control {control})")
    try:
        autotune = control == "apply"
        outcomes = _run_stages(scenario, lab, topic, variant, log, autotune=autotune, warmup_s=warmup_s)
        log("load done; waiting for the verifier's ground truth")
        truth = lab.truth(topic, scenario.window_ms, [o for o, _, _ in outcomes], timeout_s=final_timeout_s)
        for (o, stage_name, config), stage in zip(outcomes, scenario.stages, strict=True):
            result.stages.append(
                StageResult(
                    stage_name,
                    stage.network.describe(),
                    config,
                    o.producer_id,
                    o.sent,
                    o.received,
                    o.unique,
                    o.duplicated,
                    o.lost,
                    o.p_loss,
                    o.p_dup,
                    round(o.seconds, 3),
                    o.not_handed_over,
                    o.p_loss_offered,
                    o.config_events,
                    o.max_producers,
                )
            )
        windows = {start: t for start, t in totals_by_window(truth).items() if t.get("sent", 0) > 0}
        if job is not None:
            log(f"waiting for {len(windows)} final window(s) from the Spark job")
            deadline = time.monotonic() + final_timeout_s
            want = {(topic, start, f"cluster:{CLUSTER}") for start in windows}
            while not want <= set(finals):
                if job.exception() is not None:
                    raise KafkaAuditError(f"the Spark job failed: {job.exception()}")
                if time.monotonic() > deadline:
                    missing = sorted(w for _, w, _ in want - set(finals))
                    raise KafkaAuditError(f"windows not final within {final_timeout_s:.0f} s: {missing}")
                time.sleep(0.5)
        for start, t in sorted(windows.items()):
            sent, unique, dup = t["sent"], t["unique"], t["duplicated"]
            row = finals.get((topic, start, f"cluster:{CLUSTER}"), {})
            result.windows.append(
                WindowComparison(
                    start,
                    sent,
                    max(0, sent - unique) / sent,
                    dup / sent,
                    row.get("loss_rate"),
                    row.get("duplicate_rate"),
                    row.get("late"),
                    row.get("p_loss"),
                    row.get("gamma_actual"),
                    row.get("model_version"),
                    row.get("model_calibrated"),
                    row.get("packet_loss_pct_est"),
                    row.get("delay_ms_est"),
                    row.get("tx_retries"),
                    row.get("request_timeouts"),
                    row.get("tcp_timeout_pct_est"),
                )
            )
        if job is not None and lifecycle is not None and lifecycle.wait_for_retrain_s > 0:
            _wait_for_retraining(job, lifecycle.wait_for_retrain_s, log)
    finally:
        stop.set()
        if job is not None:
            job.stop()
            if job.spark is not None:
                job.spark.stop()
        consumer_thread.join(60)
    return result


def _wait_for_retraining(job: Any, timeout_s: float, log: Callable[[str], None]) -> None:
    """Wait (bounded) until the job has no retraining running: its decision is then recorded."""
    if not job.live_model.process.running:
        return
    log(f"waiting up to {timeout_s:.0f} s for the running retraining")
    deadline = time.monotonic() + timeout_s
    while job.live_model.process.running and time.monotonic() < deadline:  # reaped between micro-batches
        if job.exception() is not None:
            raise KafkaAuditError(f"the Spark job failed: {job.exception()}")
        time.sleep(1.0)


def _start_job(
    lab: Lab,
    scenario: Scenario,
    work_dir: Path,
    finals: dict[tuple[str, int, str], dict[str, Any]],
    lifecycle: ModelLifecycle | None = None,
    control: str = "off",
    decisions: list[dict[str, Any]] | None = None,
) -> Any:
    from control_loop.settings import ControlSettings
    from kafka_audit.assembly import build_audit_job
    from spark_streaming.settings import SparkJobSettings

    def on_results(_batch: int, rows: list[dict[str, Any]]) -> None:
        for r in rows:
            if r["state"] == "final":
                finals[(r["topic"], r["window_start_ms"], r["tier"])] = r

    settle_ms = max(6_000, scenario.window_ms // 2)
    s = SparkJobSettings(
        bootstrap_servers=lab.bootstrap_servers,
        audit_topic=lab.audit_topic,
        clusters=[CLUSTER],
        trigger_ms=2_000,
        watermark_delay_ms=2_000,
        grace_ms=scenario.grace_ms + settle_ms,  # after the consumer's finals
        delivery_margin_ms=scenario.delivery_margin_ms,
        max_final_wait_ms=scenario.max_final_wait_ms,
        final_settle_ms=settle_ms,
        heartbeat_ms=1_000,
        metrics_port=0,
        # the stage's load follows a producers hint (audit_producer.load): the same offered stream over
        # more producers, so the controller may suggest scaling out
        suggest_producers=True,
        checkpoint_dir=work_dir / "spark" / "checkpoint",
        parquet_dir=work_dir / "spark" / "results",
        **(lifecycle.job_settings() if lifecycle is not None else {"retrain": False}),
    )
    control_settings = (
        ControlSettings(
            mode=control,  # type: ignore[arg-type]
            groups={lab.topic(scenario.topic): control_group(scenario)},
            dwell_ms=CONTROL_DWELL_MS,
            rollback_windows=2,
            evaluation_timeout_ms=120_000,
        )
        if control != "off"
        else None
    )
    job = build_audit_job(
        s,
        alerts=None,  # the testbed judges the audit against its ground truth, not by alerts
        control=control_settings,
        listeners=[on_results],
        control_listeners=[decisions.append] if decisions is not None else [],
    ).job
    job.start()
    return job


CONTROL_DWELL_MS = 20_000
"""The testbed's control-loop dwell time, ms: a scenario stage lasts 15-60 s, so the default minute
would let the loop act at most once or twice per run."""


def control_group(scenario: Scenario) -> str:
    """Return the producer group of a scenario's autotuned producers on the control topic."""
    return f"testbed-{scenario.name}"


PREPARE_S = 10.0
"""Lead time of the prepared stage producers, s: every stage's producer process starts before the first
stage, creates and checks its producer and waits for its stage's start (``ProducerRun.start_at``)."""


def _warm_up(lab: Lab, first: ProducerRun, seconds: float, log: Callable[[str], None]) -> None:
    """Offer ``seconds`` s of unaudited load like the first stage's producer ``first`` (testbed.warmup)."""
    from testbed.warmup import warm_up

    topic = lab.topic(f"{first.topic}.warmup")
    done = warm_up(
        lab.kconfig,
        topic,
        first.config,
        rate=first.rate,
        seconds=seconds,
        message_bytes=first.message_bytes or 200,
        flush_timeout_s=min(5.0, PREPARE_S / 2),  # the prepared producers start PREPARE_S after the load
    )
    log(
        f"warm-up: {done.offered} messages in {done.seconds:.0f} s to {topic} "
        f"({done.delivered} delivered, {done.failed} failed; unaudited)"
    )


def _run_stages(
    scenario: Scenario,
    lab: Lab,
    topic: str,
    variant: str,
    log: Callable[[str], None],
    autotune: bool = False,
    warmup_s: float = 0.0,
) -> list[tuple[ProducerOutcome, str, dict[str, Any]]]:
    """Run the stages; return each stage's producer outcome, name and configuration.

    Each stage has its own producer (its own producer id: the per-stage totals). Without the control
    loop, every stage's producer process is started before the first stage and begins its load at the
    stage's start (``start_at``), so a stage begins on time with a producer that is up, as a running
    application meets a change of the network; the network changes at that moment. Before, each
    stage's process started when its stage began, and its start-up (imports, metadata, connections
    through the new network) fell into the stage's first window. The first stage starts on an audit
    window boundary, so when the stages last whole windows (the shipped scenarios' 15 s do not; their
    ``--stage-seconds`` 30, 90, 150 do), every window lies within one stage's network. With the control
    loop (``autotune``) each producer starts with its stage (an idle producer of a later stage would join
    the control group early).
    """
    prepared = not autotune
    start = time.time() + (PREPARE_S + warmup_s if prepared else 0.0)
    if prepared:  # on a window boundary: with stages a whole number of windows long, no window spans two
        window_s = scenario.window_ms / 1000
        start = math.ceil(start / window_s) * window_s
    runs: list[tuple[Stage, dict[str, Any], ProducerRun]] = []
    for i, stage in enumerate(scenario.stages):
        config = scenario.stage_config(stage, variant)
        wl = scenario.stage_workload(stage)
        run = ProducerRun(
            bootstrap_servers=lab.bootstrap_servers,
            topic=topic,
            config=config,
            profile=wl.profile,
            message_bytes=wl.message_bytes,
            poll_interval_ms=wl.poll_interval_ms,
            producers=wl.producers,
            duration_s=stage.duration_s,
            window_ms=scenario.window_ms,
            client_id=f"testbed-{scenario.name}-{i}",
            seed=i,
            autotune=autotune,
            group=control_group(scenario) if autotune else None,
            start_at=start if prepared else None,
        )
        runs.append((stage, config, run))
        start += stage.duration_s
    if prepared:  # they connect and wait in the first stage's network, as an application that runs in it
        lab.apply(runs[0][0].network)
    procs = [lab.start_producer(run) for _, _, run in runs] if prepared else []
    try:
        if warmup_s > 0:
            _warm_up(lab, runs[0][2], warmup_s, log)
        for i, (stage, config, run) in enumerate(runs):
            if run.start_at is not None:
                time.sleep(max(0.0, run.start_at - time.time()))
            lab.apply(stage.network)  # the previous stage's producer may still be flushing: traffic flows
            log(f"stage {i + 1}/{len(scenario.stages)} {stage.name!r}: {stage.network.describe()}; {config}")
            if not prepared:
                procs.append(lab.start_producer(run))
                time.sleep(stage.duration_s)  # the stage's wall-clock length: the producer sends this long
    except BaseException:  # Ctrl-C or a failed warm-up: the waiting producers of later stages too
        for p in procs:
            stop_quietly(p)
        raise
    return [(Lab.finish_producer(p), stage.name, cfg) for p, (stage, cfg, _) in zip(procs, runs, strict=True)]
