# kafka-audit: the two commands a new machine needs are `make demo` and `make test`.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
CLI := $(VENV)/bin/kafka-audit
export SPARK_LOCAL_IP := 127.0.0.1

.PHONY: bootstrap demo test test-unit lint bench lock image clean

bootstrap:  ## venv (cached, keyed by dependencies), Maven jars, Debian packages: idempotent
	@bash scripts/bootstrap.sh

demo: bootstrap  ## kafka-audit up on the embedded default: local Kafka + audit consumer + Spark + load, ~2 min
	rm -rf var/demo
	$(CLI) up --config examples/demo.toml --json-out var/demo-results.jsonl

test: bootstrap  ## lint + the layers contract + every test tier (unit and integration against the real local broker)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet --site-dir var/site  # no end-of-life banner in the test log
	VENV=$(VENV) bash scripts/test_tiers.sh  # JUnit (Maven Surefire) beside pytest's parallel tier, then the solo tier

test-unit: bootstrap
	$(VENV)/bin/pytest -m "not integration"

lint: bootstrap
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/ruff format --check . || true

bench: bootstrap  ## benchmarks (not tests): print tables with ratios against baselines
	$(PY) lab/bench/audit_consumer.py
	$(PY) lab/bench/producer.py
	$(PY) lab/bench/spark_reconciliation.py
	$(PY) lab/bench/retrain.py

lock: bootstrap  ## requirements.lock: the product's runtime dependencies pinned from the dev venv (commit it)
	$(PY) scripts/lock.py

image: bootstrap  ## build deploy/Dockerfile with podman on a local Debian base and run it against a local cluster (the lab)
	bash lab/container/build_and_run.sh

clean:
	rm -rf var build .pytest_cache .ruff_cache
