"""Alert rules, their state machine, and sinks (alerts topic, Alertmanager, webhook)."""
