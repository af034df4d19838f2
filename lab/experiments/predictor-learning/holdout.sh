#!/usr/bin/env bash
# Held-out phase: the shift scenario (stages no training run had) served by the registry's champion.
# Usage: holdout.sh VARIANT[:POLL_INTERVAL_MS] ...   (env STAGE_SECONDS, default 30; L, default var/learn)
cd "$(dirname "$0")/../../.." || exit 1
L=${L:-var/learn}
for run in "$@"; do
  IFS=: read -r variant poll <<< "$run"
  poll=${poll:-1}
  echo "=== $(date +%T) shift $variant poll ${poll} ms"
  .venv/bin/kafka-audit testbed run shift --variant "$variant" --out "$L/results/shift-$variant-p$poll" \
    --data-dir "$L/run" --retrain --model-registry-dir "$L/models" --training-dir "$L/training-holdout" \
    --retrain-every-windows 100000 --retrain-min-windows 100000 --wait-for-retrain-s 0 \
    --stage-seconds "${STAGE_SECONDS:-30}" --poll-interval-ms "$poll" > "$L/log-shift-$variant-p$poll.txt" 2>&1
  echo "exit $? $(date +%T)"
done
