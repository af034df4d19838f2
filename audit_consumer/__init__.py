"""Audit consumer: counts what one cluster really holds, exactly once across crashes."""
