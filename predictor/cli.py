"""`kafka-audit predictor train|evaluate|predict|retrain` and `kafka-audit suggest`.

Heavy imports (torch, pandas) happen inside the command bodies so ``kafka-audit --help`` stays fast.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, get_type_hints

import typer
from rich.console import Console
from rich.table import Table

from kafka_plumbing.errors import KafkaAuditError
from predictor import SHARED_DATA as SHARED_CSV
from predictor.settings import ENV_PREFIX as RETRAIN_ENV_PREFIX
from predictor.settings import RetrainSettings, load_retrain_settings

if TYPE_CHECKING:
    from pydantic.fields import FieldInfo

predictor_app = typer.Typer(
    help=(
        "Predict P_l, P_d (90% intervals) and throughput from the producer configuration and the network "
        "(PyTorch; Wu, Shang, Wolter 2020, Eq. 1). Acceptance check of the shipped model: "
        "`kafka-audit predictor evaluate --json` (held-back 20% of the paper's measurements, "
        "predictor/base_data/wu2020/experiments.csv)."
    ),
    no_args_is_help=True,
)
console = Console()
err_console = Console(stderr=True)

ModelDir = Annotated[
    Path | None,
    typer.Option("--model", help="Model directory (model.pt + card.json); default: the shipped model."),
]
DataFiles = Annotated[
    list[Path] | None,
    typer.Option(
        "--data",
        help="Experiment CSV in the experiments.csv format; repeat for more (--data a.csv --data b.csv). "
        "Default: the paper's measurements (package data, predictor/base_data/wu2020/experiments.csv).",
    ),
]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
OldBatchSize = Annotated[
    float | None, typer.Option("--batch-size", hidden=True, help="Deprecated: --batch-num-messages.")
]


def _option(name: str, annotation: Any, default: Any) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


FEATURE_OPTIONS: tuple[inspect.Parameter, ...] = (
    *(
        _option(name, Annotated[kind, typer.Option(_flag(name), help=text)], default)
        for name, kind, default, text in (
            ("acks", int, 1, "librdkafka acks: 0 (at-most-once) or 1 (at-least-once)."),
            ("batch_num_messages", float, 1.0, "librdkafka batch.num.messages B, messages (>= 1)."),
            ("packet_loss_pct", float, 0.0, "Network packet loss L, percent 0-100."),
            ("delay_ms", float, 30.0, "One-way network delay D, ms (0-60000)."),
            ("message_size_bytes", float, 100.0, "Message size M, bytes (>= 1)."),
            ("message_timeout_ms", float, 5000.0, "librdkafka message.timeout.ms T_o, ms (0 = infinite)."),
            (
                "poll_interval_ms",
                float,
                0.0,
                "Polling interval delta between source reads, ms (0 = full load).",
            ),
            (
                "tcp_timeout_pct",
                float,
                0.0,
                "TCP retransmission timeouts per 100 segments sent, percent 0-100 (loss bursts read high; "
                "0 = none or unknown; models from before it ignore it).",
            ),
        )
    ),
    _option("batch_size", OldBatchSize, None),
)
"""The options of one configuration and network (``predict``, ``suggest``): the eight
:data:`~predictor.features.FEATURES` and the deprecated ``--batch-size``."""


def _retrain_option(name: str, field: FieldInfo) -> inspect.Parameter:
    env = f"{RETRAIN_ENV_PREFIX}{name.upper()}"
    kind = field.annotation
    text = f"{field.description} Default: {env} if set, else {field.default:g}."
    return _option(
        name, Annotated[kind | None, typer.Option(_flag(name), help=text, show_default=False)], None
    )


RETRAIN_OPTIONS: tuple[inspect.Parameter, ...] = tuple(
    _retrain_option(name, field) for name, field in RetrainSettings.model_fields.items()
)
"""One option per :class:`~predictor.settings.RetrainSettings` field (``--min-windows``), default None:
an option not given leaves the field to the environment (``KAFKA_AUDIT_RETRAIN_*``), then the default."""


def with_options(
    options: Sequence[inspect.Parameter], into: str
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Return a decorator giving a Typer command the ``options``, passed to it as one dict ``into``.

    The decorated command declares a parameter ``into`` (a ``dict[str, Any]``) instead of the options;
    Typer sees the command's other parameters followed by ``options`` (their help, defaults and
    flags), and the command receives ``{option name: value as given or its default}``.

    Args:
        options: Keyword-only parameters with ``Annotated[type, typer.Option(...)]`` annotations.
        into: The name of the command's parameter that receives the dict.
    """
    names = [o.name for o in options]

    def decorate(command: Callable[..., None]) -> Callable[..., None]:
        hints = get_type_hints(command, include_extras=True)
        own = [
            p.replace(annotation=hints[p.name])
            for p in inspect.signature(command).parameters.values()
            if p.name != into
        ]

        @functools.wraps(command)
        def run(**kwargs: Any) -> None:
            given = {name: kwargs.pop(name) for name in names}
            command(**kwargs, **{into: given})

        params = [*own, *options]
        run.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in params}
        return run

    return decorate


def _fail(exc: Exception) -> typer.Exit:
    err_console.print(f"[bold red]error:[/] {exc}")
    return typer.Exit(2)


def _features(params: Mapping[str, Any]) -> dict[str, float]:
    """Return a command's feature options (``ctx.params``), checked against the allowed ranges.

    The hidden, deprecated ``--batch-size`` (parameter ``batch_size``), when given, replaces
    ``--batch-num-messages`` with a warning on stderr.

    Raises:
        ConfigError: for a value out of its range, naming the flag as given.
    """
    from predictor.features import FEATURES, FLAGS, check_value

    values, flags = {name: params[name] for name in FEATURES}, dict(FLAGS)
    if params.get("batch_size") is not None:
        err_console.print("[yellow]warning:[/] --batch-size is deprecated; use --batch-num-messages")
        values["batch_num_messages"], flags["batch_num_messages"] = params["batch_size"], "--batch-size"
    return {name: check_value(name, v, flags[name]) for name, v in values.items()}


def _data(paths: list[Path] | None) -> list[Path]:
    return list(paths) if paths else [SHARED_CSV]


def _metrics_table(title: str, m: dict[str, Any]) -> Table:
    table = Table(title=title)
    for col in (
        "family",
        "n",
        "MAE P_l",
        "MAE P_d",
        "cover. 90% P_l",
        "cover. 90% P_d",
        "T rel. err",
    ):
        table.add_column(col, justify="left" if col == "family" else "right", no_wrap=col == "family")

    def row(name: str, b: dict[str, Any]) -> None:
        tp = b.get("median_rel_error_throughput")
        table.add_row(
            name,
            str(b["n"]),
            f"{b['mae_p_loss']:.4f}",
            f"{b['mae_p_dup']:.6f}",
            f"{b['coverage_90_p_loss']:.1%}",
            f"{b['coverage_90_p_dup']:.1%}",
            "-" if tp is None else f"{tp:.1%}",
        )

    for fam, b in m.get("families", {}).items():
        row(fam, b)
    row("[bold]all[/]", m)
    return table


@predictor_app.command("train")
def train_cmd(
    out: Annotated[Path, typer.Option("--out", help="Directory to write model.pt and card.json to.")],
    data: DataFiles = None,
    seed: Annotated[int, typer.Option(help="Seed (initialisation, shuffling, folds).")] = 20200,
    arch: Annotated[
        str, typer.Option(help="improved (default) or paper (the paper's 200-200-200-64 SGD baseline).")
    ] = "improved",
    epochs: Annotated[int | None, typer.Option(help="Override the epochs per member.", min=1)] = None,
    members: Annotated[
        int | None, typer.Option(help="Override the ensemble size (cross-fit folds).", min=1)
    ] = None,
    threads: Annotated[
        int, typer.Option(help="torch CPU threads (results are reproducible per count).", min=1)
    ] = 1,
    baseline: Annotated[
        bool,
        typer.Option(
            "--baseline", help="Also train the paper's ANN on the same split; its metrics go in the card."
        ),
    ] = False,
    as_json: AsJson = False,
) -> None:
    """Train on the non-held-back ~80% of --data; write weights + JSON card (data sha256, split, metrics)."""
    from dataclasses import replace

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from predictor.nets import IMPROVED_SPEC, PAPER_SPEC
    from predictor.training_run import train_model

    if arch not in ("improved", "paper"):
        raise _fail(KafkaAuditError(f"--arch {arch!r}: allowed values are improved, paper"))
    spec = IMPROVED_SPEC if arch == "improved" else PAPER_SPEC
    if epochs is not None:
        spec = replace(spec, epochs=epochs)
    if members is not None:
        spec = replace(spec, members=members)
    try:
        with Progress(
            TextColumn("training {task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=err_console,
            transient=as_json,
        ) as bar:
            what = f"{arch} ({spec.members} member(s) x {spec.epochs} epochs)"
            task = bar.add_task(what + (" + paper baseline" if baseline else ""), total=None)
            model = train_model(
                _data(data),
                spec,
                seed,
                lambda done, total: bar.update(task, completed=done, total=total),
                threads,
                baseline=baseline,
            )
        model.save(out)
    except KafkaAuditError as exc:
        raise _fail(exc) from exc
    card = model.card
    if as_json:
        console.print_json(
            json.dumps(
                {"out": str(out), "training_seconds": card["training_seconds"], "metrics": card["metrics"]}
            )
        )
        return
    console.print(
        _metrics_table(f"held-back split ({card['split']['n_heldout']} rows)", card["metrics"]["heldout"])
    )
    if "paper_baseline_heldout" in card["metrics"]:
        console.print(
            _metrics_table("paper baseline (same split)", card["metrics"]["paper_baseline_heldout"])
        )
    console.print(f"wrote {out}/model.pt and card.json; training took {card['training_seconds']} s")


@predictor_app.command("evaluate")
def evaluate_cmd(
    model_dir: ModelDir = None,
    data: DataFiles = None,
    split: Annotated[
        str,
        typer.Option(
            help="auto: the held-back rows of files the model was trained on, all rows of other files; "
            "heldout | train | all: that part of the settings-hash split for every file."
        ),
    ] = "auto",
    registry: Annotated[
        Path | None,
        typer.Option(
            "--registry",
            help="Model registry: evaluate its champion (unless --model) and list every version with the "
            "counterfactual score its promotion decision recorded.",
        ),
    ] = None,
    from_results: Annotated[
        Path | None,
        typer.Option(
            "--from-results",
            help="Training store (the job's training_dir): also compute the model's leave-one-configuration-"
            "out score on it (one retraining per held-out configuration).",
        ),
    ] = None,
    loco_folds: Annotated[
        int, typer.Option("--loco-folds", min=1, help="Configurations held out with --from-results.")
    ] = 3,
    as_json: AsJson = False,
) -> None:
    """MAE of P_l and P_d, 90% interval coverage, per experiment family; counterfactual scores.

    Acceptance: `kafka-audit predictor evaluate --json` evaluates the shipped model on the held-back 20% of
    the paper's measurements (package data, predictor/base_data/wu2020/experiments.csv; MAE P_l < 0.02,
    coverage >= 0.85), from any working directory; spelled out from the repository root: `kafka-audit
    predictor evaluate --data predictor/base_data/wu2020/experiments.csv --split heldout --json`.
    """
    import os

    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as retrain: --from-results retrains
    from predictor.counterfactual import loco_score
    from predictor.decision_tables import loco_table, registry_rows, registry_table
    from predictor.evaluate import evaluate_model
    from predictor.model import Predictor
    from predictor.registry import ModelRegistry
    from predictor.training_store import open_store

    if split not in ("auto", "heldout", "train", "all"):
        raise _fail(KafkaAuditError(f"--split {split!r}: allowed values are auto, heldout, train, all"))
    try:
        reg = None
        if registry is not None:
            if not registry.is_dir():
                raise KafkaAuditError(f"--registry {registry}: not a directory")
            reg = ModelRegistry(registry)
        where = model_dir if model_dir is not None or reg is None else reg.champion_dir()
        model = Predictor.load(where)
        result = evaluate_model(model, _data(data), split)  # type: ignore[arg-type]
        if reg is not None:
            result["registry"] = registry_rows(reg)
        if from_results is not None:
            local = open_store(from_results).load()
            settings = load_retrain_settings(loco_folds=loco_folds)
            result["loco"] = loco_score(model, local, _data(data), settings).to_json()
    except KafkaAuditError as exc:
        raise _fail(exc) from exc
    result["model"] = str(where) if where else "default"
    if as_json:
        console.print_json(json.dumps(result))
        return
    console.print(_metrics_table(f"{result['model']} model on {result['split']}", result))
    if "registry" in result:
        console.print(registry_table(result["registry"], f"model registry {registry}"))
    if "loco" in result:
        loco = result["loco"]
        title = f"leave-one-configuration-out on {from_results}: {len(loco['folds'])} of "
        if loco["folds"]:
            console.print(loco_table(loco, title + f"{loco['n_configurations']} configurations held out"))
        else:
            console.print("fewer than two producer configurations in the store: no counterfactual score")


@predictor_app.command("predict")
@with_options(FEATURE_OPTIONS, into="given")
def predict_cmd(given: dict[str, Any], model_dir: ModelDir = None, as_json: AsJson = False) -> None:
    """Predict P_l, P_d (with 90% intervals) and throughput for one configuration and network."""
    import pandas as pd

    from predictor.model import Predictor

    try:
        row = _features(given)
        out = Predictor.load(model_dir).predict(pd.DataFrame([row])).iloc[0].to_dict()
    except KafkaAuditError as exc:
        raise _fail(exc) from exc
    if as_json:
        console.print_json(json.dumps({"input": row, **{k: float(v) for k, v in out.items()}}))
        return
    table = Table(title="predicted (90% interval)")
    for col in ("metric", "value", "interval"):
        table.add_column(col, justify="right")
    table.add_row("P_l", f"{out['p_loss']:.4f}", f"[{out['p_loss_lo']:.4f}, {out['p_loss_hi']:.4f}]")
    table.add_row("P_d", f"{out['p_dup']:.6f}", f"[{out['p_dup_lo']:.6f}, {out['p_dup_hi']:.6f}]")
    table.add_row("throughput", f"{out['throughput_msgs_per_s']:.0f} msg/s", "")
    console.print(table)


@with_options(FEATURE_OPTIONS, into="given")
def suggest_cmd(
    given: dict[str, Any],
    producers: Annotated[int, typer.Option(help="Number of producers N_p sharing the stream (>= 1).")] = 1,
    arrival_rate: Annotated[
        float | None,
        typer.Option(
            "--arrival-rate",
            help="Stream arrival rate lambda, messages/s (default: what N_p producers serve now).",
        ),
    ] = None,
    target: Annotated[float, typer.Option(help="Required gamma (Eq. 2), in (0, 1].")] = 0.9,
    stream: Annotated[
        str, typer.Option(help="Weights preset (Table II): default, social, weblog, game.")
    ] = "default",
    weights: Annotated[
        str | None, typer.Option(help="Explicit weights w1,w2,w3,w4 (sum 1); overrides --stream.")
    ] = None,
    model_dir: ModelDir = None,
    as_json: AsJson = False,
) -> None:
    """Suggest the smallest configuration change whose predicted gamma meets --target (paper Sec. V).

    Searched: acks, batch.num.messages, message.timeout.ms, the polling interval and the number of producers.
    """
    from predictor.kpi import Weights
    from predictor.model import Predictor
    from predictor.suggest import suggest

    try:
        row = _features(given)
        if producers < 1:
            raise KafkaAuditError(f"--producers {producers}: must be >= 1")
        if arrival_rate is not None and not arrival_rate > 0:
            raise KafkaAuditError(f"--arrival-rate {arrival_rate:g}: must be > 0 messages/s")
        if not 0.0 < target <= 1.0:
            raise KafkaAuditError(f"--target {target:g}: allowed range is (0, 1]")
        if weights is not None:
            try:
                w = Weights(*(float(x) for x in weights.split(",")))
            except (TypeError, ValueError) as exc:
                raise KafkaAuditError(
                    f"--weights {weights!r}: expected four numbers w1,w2,w3,w4 summing to 1"
                ) from exc
        else:
            w = Weights.preset(stream)
        config = {
            "acks": int(row["acks"]),
            "batch.num.messages": row["batch_num_messages"],
            "message.timeout.ms": row["message_timeout_ms"],
            "poll_interval_ms": row["poll_interval_ms"],
            "producers": producers,
        }
        network = {
            "packet_loss_pct": row["packet_loss_pct"],
            "delay_ms": row["delay_ms"],
            "message_size_bytes": row["message_size_bytes"],
            "tcp_timeout_pct": row["tcp_timeout_pct"],
            "arrival_rate_msgs_per_s": arrival_rate,
        }
        result = suggest(config, network, target, w, Predictor.load(model_dir))
    except KafkaAuditError as exc:
        raise _fail(exc) from exc
    if as_json:
        console.print_json(json.dumps(None if result is None else result.to_json()))
        return
    if result is None:
        console.print(
            f"no suggestion: the current configuration's predicted gamma already meets {target:g}, "
            "or no searched configuration raises it"
        )
        return
    console.print(("[green]" if result.meets_target else "[yellow]") + result.explanation)


@predictor_app.command("retrain")
@with_options(RETRAIN_OPTIONS, into="given")
def retrain_cmd(
    given: dict[str, Any],
    from_results: Annotated[
        Path,
        typer.Option(
            "--from-results",
            help="The job's training store (its training_dir: date=*/batch-*.parquet of audited windows).",
        ),
    ],
    data: DataFiles = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Write the challenger here (model.pt + card.json); needed without --registry, ignored "
            "with it (the challenger becomes the registry's next version).",
        ),
    ] = None,
    registry: Annotated[
        Path | None,
        typer.Option(
            "--registry",
            help="Model registry (the job's model_registry_dir): retrain from its champion, save the "
            "challenger as the next version, promote it if it wins, record the decision.",
        ),
    ] = None,
    model_dir: Annotated[
        Path | None,
        typer.Option(
            "--model", help="Base model (the champion while the registry has none); default: the shipped one."
        ),
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Fine-tune the model on the deployment's own audited windows; promote it only if it is better.

    Warm start from the champion; base data (--data, default the paper's experiments.csv) plus the
    local windows, the local ones weighted up (docs/DESIGN.md, "Learning the deployment"); the 90%
    interval recalibrated on recent local windows. The challenger wins only if (a) its MAE(P_l) on the
    newest 20% of the local windows beats the champion's by --margin, and a constant's (the median
    R_l) by as much unless it is at most 0.05 (calibrated for the deployment), (b) its MAE on the paper's
    held-back split is within --tolerance of the champion's (and <= 0.02), (c) its 90% interval
    covers 80-97% of those windows, (d) its counterfactual MAE(P_l) (leave-one-configuration-out over the
    --loco-folds most frequent producer configurations) is within --loco-tolerance of the champion's, and
    (e) it keeps the model's properties (P_d 0 for acks 0, intervals containing the point, no new or
    larger rise of P_l with message.timeout.ms). Exit 0 whether promoted or rejected.

    Settings: an option given, else its KAFKA_AUDIT_RETRAIN_* environment variable, else the default.
    """
    import os

    # Before torch loads OpenMP: its threads sleep instead of spinning while they wait. On 2 busy cores
    # (a Spark job beside us) spinning made a 2-thread retrain 10-40x slower (bench/retrain.py).
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from predictor.model import Predictor
    from predictor.promotion import challenge, run_retraining
    from predictor.registry import ModelRegistry, model_version
    from predictor.training_store import open_store

    paths = _data(data)
    try:
        settings = load_retrain_settings(**given)
        if registry is not None:
            if registry.exists() and not registry.is_dir():
                raise KafkaAuditError(f"--registry {registry}: not a directory")
            reg = ModelRegistry(registry)
            decision = run_retraining(reg, from_results, paths, settings, base_model_dir=model_dir)
            where = reg.root / decision.challenger_version
            card = json.loads((where / "card.json").read_text())
        else:
            if out is None:
                raise KafkaAuditError("--out: required without --registry (where to write the challenger)")
            if out.exists() and not out.is_dir():
                raise KafkaAuditError(f"--out {out}: exists and is not a directory")
            local = open_store(from_results).load()
            champion = Predictor.load(model_dir)
            result, decision = challenge(
                champion,
                local,
                paths,
                settings,
                champion_version=model_version(champion),
                challenger_version=out.resolve().name,
            )
            result.model.save(out)
            where, card = out, result.model.card
    except KafkaAuditError as exc:
        raise _fail(exc) from exc
    if as_json:
        console.print_json(
            json.dumps(
                {
                    **decision.to_json(),
                    "model_dir": str(where),
                    "training_seconds": card.get("training_seconds"),
                    "local_split": card.get("local_split"),
                }
            )
        )
        return
    from predictor.decision_tables import decision_table

    console.print(decision_table(decision, card))
    for reason in decision.reasons:
        console.print(f"  {reason}")
    rows = ", ".join(f"{k} {v}" for k, v in decision.rows_by_source.items())
    console.print(f"trained on {rows} rows in {card.get('training_seconds')} s; wrote {where}")


def register(app: typer.Typer) -> None:
    """Add ``predictor`` (train, evaluate, predict, retrain) and ``suggest`` to the ``kafka-audit`` app."""
    app.add_typer(predictor_app, name="predictor")
    app.command("suggest")(suggest_cmd)
