"""Spark Structured Streaming reconciliation of the producer and cluster tiers (R_l, R_d, completeness)."""
