"""``python -m kafka_audit`` = ``kafka-audit``."""

from kafka_audit.cli import app

app()
