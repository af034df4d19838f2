"""Default locations of the local cluster's data (overridable per command and by environment)."""

from __future__ import annotations

import os
from pathlib import Path


def default_kafka_dir() -> Path:
    """``$KAFKA_AUDIT_KAFKA_DIR`` or ``~/.local/state/kafka-audit/kafka``."""
    env = os.environ.get("KAFKA_AUDIT_KAFKA_DIR")
    return Path(env) if env else Path.home() / ".local" / "state" / "kafka-audit" / "kafka"
