"""What the ``kafka-audit`` commands share: their option types, consoles, and how options become settings.

A command whose options configure a component (the audit consumer, the Spark job, the audited
producer) declares them with a default of None, "not given", and passes on only the options given
(:func:`build_settings`): its settings model then reads the rest from the environment, else from its
own defaults, so ``KAFKA_AUDIT_SPARK_GRACE_MS=30000 kafka-audit spark-job`` runs with a 30 s grace.
The defaults live once, in the settings models; help texts quote them (:func:`default_of`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from pydantic import ValidationError
from pydantic_settings import BaseSettings
from rich.console import Console

from kafka_plumbing.errors import config_error
from kafka_plumbing.paths import default_kafka_dir

S = TypeVar("S", bound=BaseSettings)

DEFAULT_KAFKA_DIR = default_kafka_dir()
console = Console(width=None if Console().is_terminal else 140)
err_console = Console(stderr=True)

KafkaDir = Annotated[
    Path | None,
    typer.Option(
        "--data-dir", help=f"Cluster data directory (default {DEFAULT_KAFKA_DIR}, or kafka-<NAME> beside it)."
    ),
]
ClusterName = Annotated[
    str | None,
    typer.Option(
        "--name",
        help="Name of a further local cluster (e.g. B for a MirrorMaker 2 target): its own ports and data "
        "directory kafka-<NAME> beside the default one.",
    ),
]
Bootstrap = Annotated[
    str | None,
    typer.Option("--bootstrap-servers", "-b", help="Kafka bootstrap.servers (default: the local cluster's)."),
]
ExtraProps = Annotated[
    list[str] | None,
    typer.Option("-X", help="librdkafka property key=value, passed through (repeatable)."),
]
AlertmanagerUrl = Annotated[
    str | None,
    typer.Option(
        help="Send alerts to this Prometheus Alertmanager (http://host:9093); env KAFKA_AUDIT_ALERTS_*."
    ),
]
WebhookUrl = Annotated[str | None, typer.Option(help="Send alerts to this JSON webhook.")]
GammaTarget = Annotated[
    float | None, typer.Option(help="KPI gamma target (0-1] of every topic; below it: suggestion and alert.")
]
Retrain = Annotated[
    bool | None,
    typer.Option(
        "--retrain/--no-retrain",
        help="Retrain the predictor on the audited windows in the background and promote a better model "
        "(default: on; env KAFKA_AUDIT_SPARK_RETRAIN).",
    ),
]
RegistryDir = Annotated[
    Path | None,
    typer.Option(
        help="Model registry (versions, champion, decisions); default: 'models' beside the checkpoint."
    ),
]
RetrainEveryWindows = Annotated[
    int | None,
    typer.Option(help="Retrain every N new stored windows (default 200).", min=1),
]
RetrainEveryMinutes = Annotated[
    float | None,
    typer.Option(help="... or every T minutes once 50 new windows are stored (default 60)."),
]
Control = Annotated[
    str | None,
    typer.Option(
        "--control",
        help="Control loop mode: off, advise (default: decisions are events only) or apply (write changes "
        "to the control topic for autotuned producers); env KAFKA_AUDIT_CONTROL_*.",
    ),
]


def fail(exc: Exception) -> typer.Exit:
    """Print ``exc`` as an error on stderr and return the exit (status 2) to raise."""
    err_console.print(f"[bold red]error:[/] {exc}")
    return typer.Exit(2)


def passthrough_properties(items: list[str] | None) -> dict[str, str]:
    """Return the ``-X key=value`` options as a dict of librdkafka properties.

    Raises:
        typer.BadParameter: an item has no ``=``.
    """
    out: dict[str, str] = {}
    for item in items or []:
        if "=" not in item:
            raise typer.BadParameter(f"-X {item!r}: expected key=value (a librdkafka property)")
        k, v = item.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def kafka_dir(data_dir: Path | None, name: str | None) -> Path:
    """Return ``--data-dir``, else the directory of the cluster named ``--name`` (else the default)."""
    return data_dir if data_dir is not None else default_kafka_dir(name)


def local_bootstrap(data_dir: Path | None = None) -> str:
    """Return the ``bootstrap.servers`` of the local cluster running in ``data_dir`` (default: the default).

    Raises:
        typer.BadParameter: no local cluster runs there (the user should give ``--bootstrap-servers``).
    """
    from kafka_plumbing.local_cluster import KafkaCluster

    cluster = KafkaCluster.load(data_dir or default_kafka_dir())
    if cluster is None or not cluster.running_nodes():
        raise typer.BadParameter(
            "no --bootstrap-servers given and no local cluster running: "
            "start one with `kafka-audit kafka start`",
            param_hint="--bootstrap-servers",
        )
    return cluster.bootstrap_servers


def bootstrap(servers: str | None, data_dir: Path | None = None) -> str:
    """Return ``servers`` if given, else the running local cluster's (:func:`local_bootstrap`).

    Raises:
        typer.BadParameter: neither is there.
    """
    return servers or local_bootstrap(data_dir)


def default_of(model: type[BaseSettings], field: str) -> Any:
    """Return the default of ``model``'s ``field`` (its factory's value for a field with a factory).

    For help texts, so each default is written once, in the settings model.
    """
    info = model.model_fields[field]
    if info.default_factory is not None:
        return info.default_factory()  # type: ignore[call-arg]
    return info.default


def env_name(model: type[BaseSettings], field: str) -> str:
    """Return the environment variable of ``model``'s ``field``, e.g. ``KAFKA_AUDIT_SPARK_GRACE_MS``."""
    return f"{model.model_config.get('env_prefix', '')}{field}".upper()


def setting_help(model: type[BaseSettings], field: str) -> str:
    """Return ``default <value>; env <VARIABLE>`` of ``model``'s ``field``, for an option's help text."""
    default = default_of(model, field)
    shown = ", ".join(map(str, default)) if isinstance(default, list) else default
    return f"default {shown}; env {env_name(model, field)}"


def build_settings(
    model: type[S],
    given: Mapping[str, Any],
    fallbacks: Mapping[str, Callable[[], Any]] | None = None,
) -> S:
    """Build ``model`` from the command line, then the environment, then its defaults.

    Args:
        model: A pydantic-settings model (it reads its environment variables itself).
        given: Field -> option value; None means the option was not given and is left out, so the
            environment (else the model's default) decides.
        fallbacks: Field -> function returning the command's own fallback, used only when neither the
            command line nor the environment set the field (e.g. the running local cluster's bootstrap
            servers); called only then.

    Returns:
        The settings.

    Raises:
        KafkaAuditError: a value is invalid (a ``ConfigError`` naming the setting and its environment
            variable); whatever a fallback raises.
    """
    values = {k: v for k, v in given.items() if v is not None}
    try:
        settings = model(**values)
        missing = {k: f for k, f in (fallbacks or {}).items() if k not in settings.model_fields_set}
        if missing:
            settings = model(**values, **{k: f() for k, f in missing.items()})
    except ValidationError as exc:
        raise config_error(
            exc,
            f"invalid {model.__name__} settings",
            lambda loc: f"{loc[0]} ({env_name(model, str(loc[0]))})" if loc else "",
        ) from None
    return settings


__all__ = [
    "DEFAULT_KAFKA_DIR",
    "AlertmanagerUrl",
    "Bootstrap",
    "ClusterName",
    "Control",
    "ExtraProps",
    "GammaTarget",
    "KafkaDir",
    "RegistryDir",
    "Retrain",
    "RetrainEveryMinutes",
    "RetrainEveryWindows",
    "WebhookUrl",
    "bootstrap",
    "build_settings",
    "console",
    "default_of",
    "env_name",
    "err_console",
    "fail",
    "kafka_dir",
    "local_bootstrap",
    "passthrough_properties",
    "setting_help",
]
