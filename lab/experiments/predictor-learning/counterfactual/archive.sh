#!/usr/bin/env bash
# Copy one commands.sh run directory's results into this experiment: archive.sh L NAME
# (runs/NAME/<run>/{stages.json,windows.csv}, training-windows-NAME.csv, decisions-NAME.jsonl).
set -e
L=$1 NAME=$2 D=$(dirname "$0")
for r in "$L"/results/*; do
  mkdir -p "$D/runs/$NAME/$(basename "$r")"
  cp "$r/stages.json" "$r/windows.csv" "$D/runs/$NAME/$(basename "$r")/"
done
"${PY:-.venv/bin/python}" -c "import sys; from pathlib import Path; from predictor.training_store import TrainingStore
TrainingStore(Path(sys.argv[1])).load().sort_values('window_end_ms').to_csv(sys.argv[2], index=False)" \
  "$L/training" "$D/training-windows-$NAME.csv"
cp "$L/models/decisions.jsonl" "$D/decisions-$NAME.jsonl"
