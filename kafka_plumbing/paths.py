"""Default locations of the local cluster's data (overridable per command and by environment)."""

from __future__ import annotations

import os
from pathlib import Path


def default_kafka_dir(name: str | None = None) -> Path:
    """``$KAFKA_AUDIT_KAFKA_DIR`` or ``~/.local/state/kafka-audit/kafka``; a named cluster beside it.

    Args:
        name: A second (third, ...) local cluster's name, e.g. ``B``: its directory is the default one's
            sibling ``kafka-<name>`` (``~/.local/state/kafka-audit/kafka-B``). None: the default cluster.
    """
    env = os.environ.get("KAFKA_AUDIT_KAFKA_DIR")
    base = Path(env) if env else Path.home() / ".local" / "state" / "kafka-audit" / "kafka"
    return base if name is None else base.with_name(f"{base.name}-{name}")


def default_mirror_dir(source: str, target: str) -> Path:
    """Return the directory of the MirrorMaker 2 flow ``source -> target``.

    ``mirror-<source>-<target>`` beside the default cluster's (``~/.local/state/kafka-audit/mirror-A-B``).
    """
    return default_kafka_dir().with_name(f"mirror-{source}-{target}")
