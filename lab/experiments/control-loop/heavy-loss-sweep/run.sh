#!/usr/bin/env bash
# What carries weblog's heavy-loss stage (15% Bernoulli loss, D 30 ms, 4,000 messages/s)? One `testbed
# run` per configuration, without the Spark job (~2.5 min each, root). Results: runs/<variant>/.
# Usage: bash lab/experiments/control-loop/heavy-loss-sweep/run.sh   (env L: output directory, default var/sweep)
cd "$(dirname "$0")/../../../.." || exit 1
D=lab/experiments/control-loop/heavy-loss-sweep
L=${L:-var/sweep}
run() {  # scenario variant name
  echo "=== $(date +%T) $3"
  ${KAFKA_AUDIT:-.venv/bin/kafka-audit} testbed run "$D/$1.yaml" --variant "$2" --no-spark \
    --out "$L/runs/$3" --data-dir "$L/run" > "$L/log-$3.txt" 2>&1
  echo "exit $? $(date +%T)"
}
mkdir -p "$L"
for v in default b10 b10a0 b10l20 b100 b100l5 lz4 b100lz4; do run heavy-loss "$v" "$v"; done
for v in default b10; do run heavy-loss-8-producers "$v" "np8-$v"; done
