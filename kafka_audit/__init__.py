"""kafka-audit: the command line (`kafka_audit.cli`) and the project's root exception."""

__version__ = "0.1.0"
