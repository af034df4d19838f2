#!/usr/bin/env bash
# Closed-loop experiment (issue 14): per stream, the default configuration without the loop, then the
# control loop in apply mode, on the same network stages and offered load.
# Usage: run.sh STREAM ...   (env STAGE_SECONDS, default 150; L, default var/control)
cd "$(dirname "$0")/../../.." || exit 1
L=${L:-var/control}
mkdir -p "$L"
for sc in "$@"; do
  for control in off apply; do
    echo "=== $(date +%T) $sc control $control"
    ${KAFKA_AUDIT:-.venv/bin/kafka-audit} testbed run "$sc" --out "$L/results/$sc-$control" \
      --data-dir "$L/run" --stage-seconds "${STAGE_SECONDS:-150}" --control "$control" \
      > "$L/log-$sc-$control.txt" 2>&1
    echo "exit $? $(date +%T)"
  done
done
