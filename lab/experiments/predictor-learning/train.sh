#!/usr/bin/env bash
# Training phase of the learning experiment: scenarios through the live job with retraining on.
# Usage: train.sh SCENARIO:VARIANT[:POLL_INTERVAL_MS] ...   (env STAGE_SECONDS, default 30; L, default var/learn)
cd "$(dirname "$0")/../../.." || exit 1
L=${L:-var/learn}
for run in "$@"; do
  IFS=: read -r sc variant poll <<< "$run"
  poll=${poll:-1}
  echo "=== $(date +%T) $sc $variant poll ${poll} ms"
  .venv/bin/kafka-audit testbed run "$sc" --variant "$variant" --out "$L/results/$sc-$variant-p$poll" \
    --data-dir "$L/run" --retrain --model-registry-dir "$L/models" --training-dir "$L/training" \
    --retrain-every-windows 15 --retrain-min-windows 30 --retrain-data lab/experiments/batch-pktloss-grid/testbed-batch-pktloss.csv \
    --wait-for-retrain-s 120 --stage-seconds "${STAGE_SECONDS:-30}" --poll-interval-ms "$poll" \
    > "$L/log-$sc-$variant-p$poll.txt" 2>&1
  echo "exit $? $(date +%T)"
done
