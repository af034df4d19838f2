#!/usr/bin/env bash
# Held-out phase: the shift scenario (stages no training run had) served by the registry's champion.
cd /work/main
L=var/learn
for variant in "$@"; do
  echo "=== $(date +%T) shift $variant"
  .venv/bin/kafka-audit testbed run shift --variant "$variant" --out "$L/results/shift-$variant" \
    --data-dir "$L/run" --retrain --model-registry-dir "$L/models" --training-dir "$L/training-holdout" \
    --retrain-every-windows 100000 --retrain-min-windows 100000 --wait-for-retrain-s 0 \
    > "$L/log-shift-$variant.txt" 2>&1
  echo "exit $? $(date +%T)"
done
