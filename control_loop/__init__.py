"""The control loop: live producer configuration from the predictions (issue 14, paper Sec. V).

Per producer group the controller (:mod:`control_loop.decide`, pure) turns the newest final window
results' predicted gamma (Eq. 2) and configuration suggestion into decisions within guardrails
(allowed values, dwell time, gamma margin, rollback, kill switch). In ``apply`` mode a change is a
:class:`~audit_record.control_record.ControlRecord` on the compacted control topic
(:mod:`control_loop.publish`), which autotuned producers of the group follow; in ``advise`` mode (the
default) decisions are only reported. :func:`control_loop.loop.attach_to_job` runs it with the
Spark job's driver; every decision reaches ``ReconciliationJob.control_listeners`` (the alert pipeline
turns it into an event). See ``docs/DESIGN.md``, "Control loop".

Layer: below ``alerts`` and ``dashboards``, above ``spark_streaming`` (``pyproject.toml``).
"""
