#!/usr/bin/env bash
# Training phase of the learning experiment: scenarios through the live job with retraining on.
cd /work/main
L=var/learn
for run in "$@"; do
  sc=${run%%:*}; variant=${run##*:}
  echo "=== $(date +%T) $sc $variant"
  .venv/bin/kafka-audit testbed run "$sc" --variant "$variant" --out "$L/results/$sc-$variant" \
    --data-dir "$L/run" --retrain --model-registry-dir "$L/models" --training-dir "$L/training" \
    --retrain-every-windows 15 --retrain-min-windows 30 --retrain-data data/testbed-batch-pktloss.csv \
    --wait-for-retrain-s 120 > "$L/log-$sc-$variant.txt" 2>&1
  echo "exit $? $(date +%T)"
done
