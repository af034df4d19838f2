"""Where the librdkafka interceptor plugin is (``rdkafka_plugin/``, built by ``make bootstrap``).

``librdkafka-audit-plugin.so`` audits any librdkafka-based producer by configuration alone
(``plugin.library.paths=<path>``: kcat, confluent-kafka for Python, Go, .NET, JavaScript, C/C++;
docs/DESIGN.md, "librdkafka plugin"; docs/guide/rdkafka-plugin.md). The bootstrap builds it with
``make -C rdkafka_plugin`` into ``<cache>/rdkafka-plugin-<hash of its sources and the audit record schema>``
and links ``<cache>/rdkafka-plugin`` to it.
"""

from __future__ import annotations

import os
from pathlib import Path

from kafka_plumbing.errors import KafkaAuditError
from kafka_plumbing.jvm import cache_dir

PLUGIN_FILE = "librdkafka-audit-plugin.so"
"""File name of the plugin (a shared object exporting librdkafka's ``conf_init``)."""

BUILD_COMMAND = "make bootstrap (or: make -C rdkafka_plugin OUT=<dir> PYTHON=../.venv/bin/python)"
"""What builds the plugin, named in errors."""


class PluginNotFoundError(KafkaAuditError):
    """The librdkafka plugin is not built: run ``make bootstrap`` (or set ``KAFKA_AUDIT_RDKAFKA_PLUGIN``)."""


def rdkafka_plugin() -> Path:
    """Return the path of the librdkafka plugin, for ``plugin.library.paths``.

    ``$KAFKA_AUDIT_RDKAFKA_PLUGIN`` (a ``.so`` file) overrides ``<cache>/rdkafka-plugin/`` +
    :data:`PLUGIN_FILE`.

    Raises:
        PluginNotFoundError: if the file does not exist, naming the command that builds it.
    """
    override = os.environ.get("KAFKA_AUDIT_RDKAFKA_PLUGIN")
    path = Path(override) if override else cache_dir() / "rdkafka-plugin" / PLUGIN_FILE
    if not path.is_file():
        raise PluginNotFoundError(f"no librdkafka plugin at {path}: run {BUILD_COMMAND}")
    return path


__all__ = ["BUILD_COMMAND", "PLUGIN_FILE", "PluginNotFoundError", "rdkafka_plugin"]
