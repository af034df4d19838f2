#!/usr/bin/env bash
# Sample every producer namespace the testbed creates (stall_probe.py sample), beside a testbed run.
# Usage: run.sh OUT_DIR   (stop it with kill when the run is over)
here="$(cd "$(dirname "$0")" && pwd)"
out=$1; mkdir -p "$out"
declare -A seen
while true; do
  for ns in $(ip netns list | awk '{print $1}' | grep -- '-p$'); do
    if [ -z "${seen[$ns]}" ]; then
      seen[$ns]=1
      (ip netns exec "$ns" python3 "$here/stall_probe.py" sample > "$out/$ns.csv" 2>/dev/null) &
    fi
  done
  sleep 0.5
done
