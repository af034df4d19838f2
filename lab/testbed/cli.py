"""`kafka-audit testbed ...`: network impairment, scenarios, grids, figures."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from kafka_plumbing.errors import ConfigError, KafkaAuditError

testbed_app = typer.Typer(
    help="Testbed: impaired producer network (namespaces + NFQUEUE), scenarios, experiment grids, figures.",
    no_args_is_help=True,
)
console = Console(width=None if Console().is_terminal else 140)
err_console = Console(stderr=True)


def _fail(exc: Exception) -> typer.Exit:
    err_console.print(f"[bold red]error:[/] {exc}")
    return typer.Exit(2)


def _interrupt_as_exception() -> None:
    """Turn SIGTERM into KeyboardInterrupt so context managers clean the namespaces up."""

    def handler(*_: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def _impairment(loss_pct: float, ge: str | None, delay_ms: float, jitter_ms: float, distribution: str) -> Any:
    from pydantic import ValidationError

    from testbed.impairment import BernoulliLoss, Delay, GilbertElliottLoss, Impairment

    try:
        loss: Any = BernoulliLoss(percent=loss_pct) if loss_pct else None
        if ge:
            parts = [float(x) for x in ge.split(",")]
            if not 1 <= len(parts) <= 4:
                raise typer.BadParameter("expected p[,r[,1-h[,1-k]]] in percent", param_hint="--gemodel")
            names = ("p", "r", "one_minus_h", "one_minus_k")
            loss = GilbertElliottLoss(**dict(zip(names, parts, strict=False)))
        delay = Delay(delay_ms=delay_ms, jitter_ms=jitter_ms, distribution=distribution)  # type: ignore[arg-type]
        return Impairment(delay=delay, loss=loss)
    except (ValidationError, ValueError) as exc:
        raise typer.BadParameter(str(exc)) from exc


@testbed_app.command("probe")
def probe(
    loss_pct: Annotated[float, typer.Option("--loss-pct", help="Bernoulli packet loss L, percent.")] = 0.0,
    gemodel: Annotated[
        str | None,
        typer.Option(help="Gilbert-Elliott loss as NetEm's `gemodel p r 1-h 1-k`, percent, comma-separated."),
    ] = None,
    delay_ms: Annotated[float, typer.Option(help="Delay D, ms (one way).")] = 0.0,
    jitter_ms: Annotated[float, typer.Option(help="Delay jitter, ms.")] = 0.0,
    distribution: Annotated[
        str, typer.Option(help="Jitter distribution: pareto, normal, uniform.")
    ] = "pareto",
    count: Annotated[int, typer.Option(help="Probe packets.")] = 5000,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Impair a fresh producer namespace and measure what it achieves with ICMP probes (needs root)."""
    from testbed.netns import ProducerNamespace
    from testbed.probe import ping_probe

    imp = _impairment(loss_pct, gemodel, delay_ms, jitter_ms, distribution)
    _interrupt_as_exception()
    try:
        with ProducerNamespace() as ns:
            base = ping_probe(ns, count=min(count, 500))
            ns.apply(imp)
            res = ping_probe(ns, count=count)
    except KafkaAuditError as exc:
        raise _fail(exc) from exc
    out = {
        "requested": {
            "impairment": imp.describe(),
            "loss_pct": imp.loss_pct,
            "delay_ms": imp.delay.delay_ms if imp.delay else 0.0,
            "mean_burst": getattr(imp.loss, "mean_burst_packets", None),
        },
        "achieved": {
            **res.summary(),
            "rtt_increase_ms": (res.median_rtt_ms or 0.0) - (base.median_rtt_ms or 0.0),
        },
    }
    if as_json:
        print(json.dumps(out))
        return
    table = Table(title=f"testbed probe: {imp.describe()} ({count} packets)")
    table.add_column("quantity")
    table.add_column("requested", justify="right")
    table.add_column("achieved", justify="right")
    a = out["achieved"]
    table.add_row("loss L, %", f"{imp.loss_pct:.2f}", f"{a['loss_pct']:.2f}")
    table.add_row(
        "median RTT increase, ms", f"{out['requested']['delay_ms']:.1f}", f"{a['rtt_increase_ms']:.1f}"
    )
    burst = out["requested"]["mean_burst"]
    table.add_row(
        "mean loss burst, packets",
        f"{burst:.2f}" if burst else "-",
        f"{a['mean_burst']:.2f}" if a["mean_burst"] else "-",
    )
    console.print(table)


@testbed_app.command("grid")
def grid(
    grid_file: Annotated[Path, typer.Argument(help="Grid YAML (see testbed/grids/).")],
    out: Annotated[Path, typer.Option(help="CSV to append to (experiments.csv columns).")] = Path(
        "var/testbed/grid.csv"
    ),
    messages: Annotated[int | None, typer.Option(help="N messages per experiment (overrides).")] = None,
    brokers: Annotated[int, typer.Option(help="Kafka brokers (the paper: 3).")] = 3,
    data_dir: Annotated[Path, typer.Option(help="Cluster data directory.")] = Path("var/testbed/kafka"),
    congestion_control: Annotated[
        str | None,
        typer.Option(help="TCP congestion control of the producer's namespace (overrides the grid file's)."),
    ] = None,
) -> None:
    """Sweep a grid of experiments; one CSV row each; resumable (finished experiments are skipped)."""
    import shutil

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from testbed.grid import load_grid, run_grid
    from testbed.lab import Lab

    try:
        spec = load_grid(grid_file)
    except KafkaAuditError as exc:
        raise _fail(exc) from exc
    if messages is not None:
        spec = spec.model_copy(update={"messages": messages})
    if congestion_control is not None:
        spec = spec.model_copy(update={"congestion_control": congestion_control})
    _interrupt_as_exception()
    shutil.rmtree(data_dir, ignore_errors=True)
    try:
        with (
            Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[last]}"),
                TimeRemainingColumn(),
                console=console,
            ) as progress,
        ):
            task = progress.add_task(f"grid {spec.name}", total=spec.size, last="")
            with progress.console.status("starting the producer namespace and Kafka (3 brokers) ..."):
                lab = Lab(data_dir, brokers=brokers, congestion_control=spec.congestion_control)
            with lab:
                run_grid(
                    spec,
                    out,
                    lab,
                    on_start=lambda todo, done: progress.update(task, completed=done),
                    on_done=lambda row: progress.update(
                        task,
                        advance=1,
                        last=(
                            f"L={row['packet_loss_pct']}% B={row['batch_num_messages']} acks={row['acks']}: "
                            f"P_l={row['p_loss']:.4f}"
                        ),
                    ),
                )
    except KeyboardInterrupt:
        err_console.print(f"interrupted; finished experiments are in {out} (rerun to resume)")
        raise typer.Exit(130) from None
    except KafkaAuditError as exc:
        raise _fail(exc) from exc
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    console.print(f"grid {spec.name}: {spec.size} experiments in {out}")


@testbed_app.command("run")
def run(
    scenario: Annotated[str, typer.Argument(help="Scenario YAML, or a shipped one: weblog, social, game.")],
    variant: Annotated[
        str, typer.Option(help="Producer configuration variant: default, tuned, ...")
    ] = "default",
    out: Annotated[Path, typer.Option(help="Results directory (stages.json, windows.csv).")] = Path(
        "var/testbed/results"
    ),
    spark: Annotated[bool, typer.Option(help="Also run the Spark reconciliation job and compare it.")] = True,
    brokers: Annotated[int, typer.Option(help="Kafka brokers (the paper: 3).")] = 3,
    data_dir: Annotated[Path, typer.Option(help="Work directory (cluster, Spark checkpoint).")] = Path(
        "var/testbed/run"
    ),
    congestion_control: Annotated[
        str | None,
        typer.Option(help="TCP congestion control of the producer's namespace (default: cubic)."),
    ] = None,
    retrain: Annotated[
        bool,
        typer.Option(
            help="Store the final windows for training and retrain in the background into "
            "--model-registry-dir (kept across runs); the job serves that registry's champion."
        ),
    ] = False,
    model_registry_dir: Annotated[
        Path, typer.Option(help="Model registry of --retrain (outside --data-dir, which is wiped).")
    ] = Path("var/testbed/models"),
    training_dir: Annotated[
        Path, typer.Option(help="Training store of --retrain (outside --data-dir).")
    ] = Path("var/testbed/training"),
    retrain_every_windows: Annotated[
        int, typer.Option(help="Retrain every N new stored windows.", min=1)
    ] = 200,
    retrain_min_windows: Annotated[
        int, typer.Option(help="Fewest local windows a retraining needs.", min=1)
    ] = 50,
    training_min_messages: Annotated[
        int, typer.Option(help="Fewest messages for a window to be stored for training.", min=1)
    ] = 500,
    retrain_data: Annotated[
        list[Path] | None,
        typer.Option(help="Base CSV beside the paper's for retraining (a testbed grid; repeatable)."),
    ] = None,
    wait_for_retrain_s: Annotated[
        float, typer.Option(help="At the end, wait this long for a running retraining, s.")
    ] = 300.0,
    stage_seconds: Annotated[
        float | None, typer.Option(help="Run every stage this long, s (default: the scenario's).")
    ] = None,
    control: Annotated[
        str,
        typer.Option(
            help="The job's control loop: off, advise (decisions only), apply (autotuned producers follow "
            "it; the offered load stays the scenario's)."
        ),
    ] = "off",
    poll_interval_ms: Annotated[
        float | None,
        typer.Option(help="Polling interval of every stage's load, ms (rate = 1/delta; default: scenario's)"),
    ] = None,
    warmup_seconds: Annotated[
        float,
        typer.Option(
            min=0.0,
            help="Unaudited load with the first stage's configuration and rate to a separate topic before "
            "the first stage, s: a fresh cluster appends slowly until its JVMs are warm (0 = none).",
        ),
    ] = 30.0,
) -> None:
    """Run a scenario: impaired audited producers, audit consumer, Spark job; compare with the verifier."""
    import shutil

    from testbed.lab import Lab
    from testbed.netns import DEFAULT_CONGESTION_CONTROL
    from testbed.run import ModelLifecycle, run_scenario
    from testbed.scenario import load_scenario

    if control not in ("off", "advise", "apply"):
        raise _fail(ConfigError(f"--control {control!r}: allowed values are off, advise, apply"))
    try:
        sc = load_scenario(scenario).with_overrides(stage_seconds, poll_interval_ms)
        for stage in sc.stages:
            sc.stage_config(stage, variant)
    except KafkaAuditError as exc:
        raise _fail(exc) from exc
    _interrupt_as_exception()
    shutil.rmtree(data_dir, ignore_errors=True)
    try:
        with console.status("starting the producer namespace and Kafka ..."):
            cc = congestion_control or DEFAULT_CONGESTION_CONTROL
            lab = Lab(data_dir, brokers=brokers, congestion_control=cc)
        with lab:
            lifecycle = (
                ModelLifecycle(
                    model_registry_dir,
                    training_dir,
                    retrain_every_windows=retrain_every_windows,
                    retrain_min_windows=retrain_min_windows,
                    training_min_messages=training_min_messages,
                    retrain_data=tuple(retrain_data or ()),
                    wait_for_retrain_s=wait_for_retrain_s,
                )
                if retrain
                else None
            )
            result = run_scenario(
                sc,
                lab,
                variant,
                spark=spark,
                work_dir=data_dir,
                log=console.log,
                lifecycle=lifecycle,
                control=control,
                warmup_s=warmup_seconds,
            )
    except KeyboardInterrupt:
        err_console.print("interrupted; the namespaces and the cluster were removed")
        raise typer.Exit(130) from None
    except KafkaAuditError as exc:
        raise _fail(exc) from exc
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    result.write(out)
    table = Table(title=f"scenario {sc.name} ({variant}): per stage, ground truth")
    cols = ("stage", "network", "acks", "B", "T_o ms", "sent", "unique", "R_l", "R_d", "changes")
    for col in cols:
        table.add_column(col, justify="left" if col in ("stage", "network") else "right")
    for s in result.stages:
        applied = [e for e in s.config_events if e.get("kind") == "applied"]
        table.add_row(
            s.name,
            s.network,
            str(s.config.get("acks", "")),
            str(s.config.get("batch.num.messages", "")),
            str(s.config.get("message.timeout.ms", "")),
            f"{s.sent:,}",
            f"{s.unique:,}",
            f"{s.offered_loss_rate:.4%}",
            f"{s.duplicate_rate:.4%}",
            str(len(applied)),
        )
    console.print(table)
    totals = result.totals()
    console.print(
        f"whole run: offered {totals['offered']:,}, R_l {totals['loss_rate']:.4%} (not handed over counts as "
        f"lost), R_d {totals['duplicate_rate']:.4%}; control {control}, "
        f"{sum(d.get('kind') in ('change', 'rollback') for d in result.decisions)} change(s) decided"
    )
    if spark:
        exact = sum(w.exact for w in result.windows)
        console.print(
            f"audit pipeline vs verifier: {exact}/{len(result.windows)} windows with equal R_l and R_d"
        )
        late = sum(w.audit_late or 0 for w in result.windows)
        if late:
            console.print(
                f"{late} message(s) reached the audit consumer after their window was final (late); "
                "a longer grace_ms (or max_final_wait_ms) in the scenario counts them"
            )
    console.print(f"results in {out}/stages.json and {out}/windows.csv")


@testbed_app.command("plot")
def plot(
    data: Annotated[
        list[Path] | None, typer.Option("--data", help="Experiment CSV(s) of ours (repeatable).")
    ] = None,
    paper: Annotated[
        Path | None,
        typer.Option(
            help="The paper's experiments.csv (default: predictor/base_data/wu2020/experiments.csv)."
        ),
    ] = None,
    out: Annotated[Path, typer.Option(help="Output directory for fig4.png ... fig8.png.")] = Path(
        "lab/experiments/batch-pktloss-grid/figures"
    ),
) -> None:
    """Draw the paper's Figs. 4-8 from experiment CSVs, the paper's data and ours side by side."""
    import pandas as pd

    from predictor import SHARED_DATA
    from testbed.plots import draw, read_csv

    paper = paper or SHARED_DATA
    sources = {}
    try:
        if paper.exists():
            sources["paper (Wu et al. 2020)"] = read_csv(paper)
        if data:
            sources["kafka-audit testbed"] = pd.concat([read_csv(p) for p in data], ignore_index=True)
    except KafkaAuditError as exc:
        raise _fail(exc) from exc
    if not sources:
        raise _fail(KafkaAuditError("no data: give --data CSV and/or --paper CSV"))
    for path in draw(sources, out):
        console.print(f"wrote {path}")


@testbed_app.command("cleanup")
def cleanup() -> None:
    """Delete testbed namespaces left behind by processes that died (needs root)."""
    from testbed.netns import cleanup_stale, require_root

    try:
        require_root()
        removed = cleanup_stale()
    except KafkaAuditError as exc:
        raise _fail(exc) from exc
    console.print(f"removed {len(removed)} namespace(s): {', '.join(removed) or '-'}")


@testbed_app.command("learn-report")
def learn_report(
    registry: Annotated[Path, typer.Option(help="Model registry the --retrain runs filled.")] = Path(
        "var/testbed/models"
    ),
    holdout: Annotated[
        Path, typer.Option(help="Training store of the held-out run (run with its own --training-dir).")
    ] = Path("var/testbed/training-holdout"),
    training: Annotated[Path, typer.Option(help="Training store of the training runs.")] = Path(
        "var/testbed/training"
    ),
    out: Annotated[Path, typer.Option(help="Where the run data and summary.json go.")] = Path(
        "var/testbed/learning"
    ),
) -> None:
    """Score the retrained champion against the shipped model on a held-out run's final windows."""
    from testbed.learning import evaluate_learning

    try:
        summary = evaluate_learning(registry, holdout, training, out)
    except KafkaAuditError as exc:
        raise _fail(exc) from exc
    table = Table(title=f"held-out windows ({summary['holdout_windows']}): MAE(P_l) and 90% coverage")
    for col in ("model", "windows", "MAE P_l", "coverage 90%"):
        table.add_column(col, justify="left" if col == "model" else "right")
    for s in summary["holdout"]:
        table.add_row(s["model"], str(s["n"]), f"{s['mae_p_loss']:.4f}", f"{s['coverage_90_p_loss']:.0%}")
    console.print(table)
    paper = summary["paper_heldout"]
    console.print(
        f"paper held-back split ({paper['n']} rows): MAE P_l champion {paper['mae_p_loss_champion']:.4f}, "
        f"shipped {paper['mae_p_loss_shipped']:.4f}; run data in {out}"
    )


@testbed_app.command("control-report")
def control_report(
    results: Annotated[
        Path, typer.Argument(help="Directory with <stream>-off and <stream>-apply run results.")
    ] = Path("var/control/results"),
    out: Annotated[Path | None, typer.Option(help="Write the comparison as JSON here.")] = None,
) -> None:
    """Compare each stream's run without the control loop with its run in apply mode (paper Table II)."""
    from testbed.control_report import compare, write_summary

    try:
        rows = compare(results)
    except KafkaAuditError as exc:
        raise _fail(exc) from exc
    table = Table(title="closed loop vs default configuration (R_l of the offered load)")
    cols = (
        "stream",
        "R_l default",
        "R_l loop",
        "ratio",
        "R_d default",
        "R_d loop",
        "exact windows",
        "changes",
        "paper default -> dynamic",
    )
    for col in cols:
        table.add_column(col, justify="left" if col == "stream" else "right")
    for r in rows:
        table.add_row(
            r.stream,
            f"{r.loss_off:.1%}",
            f"{r.loss_apply:.1%}",
            "-" if r.loss_ratio is None else f"{r.loss_ratio:.2f}",
            f"{r.dup_off:.2%}",
            f"{r.dup_apply:.2%}",
            f"{r.exact_windows_off}/{r.windows_off}, {r.exact_windows_apply}/{r.windows_apply}",
            f"{r.changes} ({'; '.join(r.configs) or '-'})",
            "-" if r.paper_off is None else f"{r.paper_off:.1%} -> {r.paper_dynamic:.1%}",
        )
    console.print(table)
    if out is not None:
        write_summary(rows, out)
        console.print(f"comparison in {out}")


def register(app: typer.Typer) -> None:
    """Add this package's commands to the ``kafka-audit`` typer app."""
    app.add_typer(testbed_app, name="testbed")
