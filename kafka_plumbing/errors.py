"""The project's root exception; each package derives its own errors from it."""


class KafkaAuditError(Exception):
    """Root of every error kafka-audit raises on purpose.

    Subclasses say what went wrong and how to recover; the CLI prints their message without a
    traceback and exits with status 2.
    """


class ConfigError(KafkaAuditError, ValueError):
    """A setting has a value outside its allowed set; the message names the key and the allowed values."""
