#!/usr/bin/env bash
# Issue 39 acceptance (a): one registry, retraining on, trained on one stream's configuration only (the
# weblog default, two runs), then the social and game default configurations on the same stages, served
# by the registry's champion (retraining off: their windows go to stores of their own). Root; 18-25
# minutes on the 2-core host. SC: the scenario (default bursts3.yaml; bernoulli4.yaml, bernoulli4-heavy.yaml).
# Then: report.py $L WINDOWS_PER_STAGE (results.json holds its output per scenario); archive.sh $L NAME
cd "$(dirname "$0")/../../../.." || exit 1
export L=${L:-var/cf39}
SC=${SC:-lab/experiments/predictor-learning/counterfactual/bursts3.yaml}
KA=${KAFKA_AUDIT:-.venv/bin/kafka-audit}
mkdir -p "$L"
for i in 1 2; do
  echo "=== $(date +%T) train-$i (weblog default configuration)"
  $KA testbed run "$SC" --variant default --out "$L/results/train-$i" --data-dir "$L/run" --retrain \
    --model-registry-dir "$L/models" --training-dir "$L/training" --retrain-every-windows 8 \
    --retrain-min-windows 16 --retrain-data lab/experiments/batch-pktloss-grid/testbed-batch-pktloss.csv \
    --wait-for-retrain-s 120 --poll-interval-ms 2 > "$L/log-train-$i.txt" 2>&1
  echo "exit $? $(date +%T)"
done
for v in social game; do
  echo "=== $(date +%T) holdout-$v"
  $KA testbed run "$SC" --variant "$v" --out "$L/results/holdout-$v" --data-dir "$L/run" --retrain \
    --model-registry-dir "$L/models" --training-dir "$L/training-holdout-$v" --retrain-every-windows 100000 \
    --retrain-min-windows 100000 --wait-for-retrain-s 0 --poll-interval-ms 2 > "$L/log-holdout-$v.txt" 2>&1
  echo "exit $? $(date +%T)"
done
echo DONE
