"""`kafka-audit dashboards ...` and `kafka-audit report`."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this package's commands to the ``kafka-audit`` typer app."""
