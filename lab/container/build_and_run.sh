#!/usr/bin/env bash
# The image builds and runs here too (issue 35, item 8): deploy/Dockerfile built with podman (no Docker
# engine on these machines) on a Debian bookworm base made locally (no image registry is reachable), its
# Python packages from a wheelhouse the host fills from PyPI (an air-gapped build), then the image's
# `kafka-audit` run against a local cluster on the host network:
#   predictor evaluate (the shipped model meets its card), a retraining from the packaged base data, and
#   `up` in monitor mode on a topic an audited producer (the image's `kafka-audit produce`) writes to, until
#   it prints final windows.
# Record: lab/experiments/container-image/README.md.   Run: make image  (or bash lab/container/build_and_run.sh)
#
# Needs root (podman, debootstrap). Caches (under $KAFKA_AUDIT_CACHE/container): the debootstrapped root
# file system, the wheelhouse (keyed by requirements.lock); podman keeps its images in /var/lib/containers.
# Each run writes its log and results to var/container/<UTC time>/.
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
CACHE="${KAFKA_AUDIT_CACHE:-$HOME/.cache/kafka-audit}"
WORK="$CACHE/container"
RUN="$REPO/var/container/$(date -u +%Y%m%dT%H%M%SZ)"
BASE_IMAGE=localhost/kafka-audit-base:bookworm-python3.11
IMAGE=localhost/kafka-audit:dev
CLI="$REPO/.venv/bin/kafka-audit"
export CONTAINERS_CONF="$REPO/lab/container/containers.conf"
PODMAN=(podman --runtime runc)
mkdir -p "$WORK" "$RUN"
exec > >(tee "$RUN/run.log") 2>&1
log() { printf '\033[1m[container %(%H:%M:%S)T]\033[0m %s\n' -1 "$*" >&2; }
declare -A SECONDS_OF
timed() {  # timed NAME command...: run it, remember its wall time
  local name=$1 t0=$SECONDS; shift
  "$@"
  SECONDS_OF[$name]=$((SECONDS - t0))
  log "$name: ${SECONDS_OF[$name]} s"
}

[ "$(id -u)" -eq 0 ] || { log "needs root (podman, debootstrap)"; exit 1; }
missing=()
for p in podman runc debootstrap uidmap; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then
  log "installing Debian packages: ${missing[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
[ -x "$CLI" ] || { log "no $CLI: run make bootstrap first"; exit 1; }

# 1. The base image: Debian bookworm + python3.11 (venv), debootstrapped from the mirror this machine uses
#    (the public python:3.11-slim-bookworm image is Debian bookworm with CPython 3.11 in /usr/local).
mirror=$(sed -n 's/^URIs: *\(http[^ ]*debian\)\/*$/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
[ -n "$mirror" ] || mirror=$(awk '$1 == "deb" && $2 ~ /debian\/?$/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
mirror=${mirror:-http://deb.debian.org/debian}
rootfs="$WORK/rootfs-bookworm-py311"
build_base() {
  if [ ! -f "$rootfs/.complete" ]; then
    rm -rf "$rootfs"
    debootstrap --variant=minbase --include=python3.11,python3.11-venv,python3-distutils,python3-lib2to3,python-is-python3,ca-certificates \
      bookworm "$rootfs" "$mirror" >"$RUN/debootstrap.log"
    security=${mirror%/debian}/debian-security
    printf 'deb %s bookworm main\ndeb %s bookworm-updates main\ndeb %s bookworm-security main\n' \
      "$mirror" "$mirror" "$security" >"$rootfs/etc/apt/sources.list"
    rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/archives/*.deb
    touch "$rootfs/.complete"
  fi
  # Imported once: a new import is a new image ID, which would void the build cache of every layer.
  "${PODMAN[@]}" image exists "$BASE_IMAGE" && return 0
  tar -C "$rootfs" --exclude=./.complete -c . | "${PODMAN[@]}" import \
    --change 'CMD ["python3"]' --change 'ENV LANG=C.UTF-8' - "$BASE_IMAGE" >/dev/null 2>&1
}
log "base image $BASE_IMAGE (debootstrap bookworm from $mirror)"
timed base build_base

# 2. The wheelhouse: every locked distribution as a wheel, fetched by the host with pip's ordinary client.
lock_key=$(sha256sum requirements.lock | cut -c1-16)
wheelhouse="$WORK/wheelhouse-$lock_key"
fill_wheelhouse() {
  if [ ! -f "$wheelhouse/.complete" ]; then
    rm -rf "$wheelhouse"
    # pip wheel: the published wheels as they are; sdist-only ones (pyspark) built into wheels here.
    python3.11 -m pip wheel -q --no-deps -w "$wheelhouse" -r requirements.lock
    touch "$wheelhouse/.complete"
  fi
}
log "wheelhouse $wheelhouse"
timed wheelhouse fill_wheelhouse
log "wheelhouse: $(find "$wheelhouse" -name '*.whl' | wc -l) wheels, $(du -sh "$wheelhouse" | cut -f1)"

# 3. The image, from deploy/Dockerfile as it is: pip reads the wheelhouse (mounted into the build) and
#    never an index; apt (Java) and Maven (the jars) reach Debian's mirror and Maven Central on the host
#    network. This machine's egress inspects TLS with its own CA, which Debian's bundle in the image does not
#    hold: Maven gets the host's Java trust store (mounted read-only) through MAVEN_OPTS.
build_image() {
  "${PODMAN[@]}" build --network host --ignorefile deploy/Dockerfile.dockerignore -f deploy/Dockerfile \
    --build-arg BASE_IMAGE="$BASE_IMAGE" --build-arg PIP_NO_INDEX=1 --build-arg PIP_FIND_LINKS=/wheelhouse \
    -v "$wheelhouse:/wheelhouse:ro" \
    -v /etc/ssl/certs/java:/host-certs:ro --build-arg MAVEN_OPTS=-Djavax.net.ssl.trustStore=/host-certs/cacerts \
    -t "$IMAGE" . >"$RUN/build.log" 2>&1 \
    || { tail -40 "$RUN/build.log"; return 1; }
}
log "building $IMAGE from deploy/Dockerfile (log: $RUN/build.log)"
timed build build_image
size=$("${PODMAN[@]}" image inspect "$IMAGE" --format '{{.Size}}')
log "image $IMAGE: $((size / 1000000)) MB"
"${PODMAN[@]}" image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -E 'kafka-audit' || true

# 4. Run it. The image's kafka-audit, as the unprivileged user the image runs as, on the host network.
mkdir -p "$RUN/shared" && chmod 0777 "$RUN/shared"
in_image() { "${PODMAN[@]}" run --rm --network host -v "$RUN/shared:/shared" -e COLUMNS=120 "$IMAGE" "$@"; }

log "kafka-audit --help (the lab's testbed and soak must not be there)"
in_image kafka-audit --help >"$RUN/help.txt"
if grep -qwE 'testbed|soak' "$RUN/help.txt"; then log "FAIL: lab commands in the image"; exit 1; fi
in_image sh -c 'python -c "import testbed"' 2>/dev/null && { log "FAIL: testbed importable"; exit 1; }
in_image pip list --format=freeze >"$RUN/pip-list.txt"
grep -q '^kafka-audit==' "$RUN/pip-list.txt"
if grep -qiE '^(kafka-audit-lab|pytest|ruff)==' "$RUN/pip-list.txt"; then log "FAIL: lab/dev tools installed"; exit 1; fi

log "kafka-audit predictor evaluate --json"
timed evaluate in_image kafka-audit predictor evaluate --json >"$RUN/evaluate.json"
python3 - "$RUN/evaluate.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"  held-back n={r['n']}  MAE P_l={r['mae_p_loss']:.4f} (< 0.02)  coverage 90% P_l={r['coverage_90_p_loss']:.1%} (>= 85%)")
assert r["mae_p_loss"] < 0.02 and r["coverage_90_p_loss"] >= 0.85, r
PY

# RETRAIN_ARGS: e.g. "--epochs 40 --members 2" for a quicker run; default the shipped model's spec.
read -r -a retrain_args <<<"${RETRAIN_ARGS:-}"
log "kafka-audit predictor train ${retrain_args[*]:-(the spec of the shipped model)}: a retraining from the packaged base data"
timed retrain in_image kafka-audit predictor train --out /shared/model --threads 2 "${retrain_args[@]}" --json \
  >"$RUN/train.json"
in_image kafka-audit predictor evaluate --model /shared/model --json >"$RUN/evaluate-retrained.json"
python3 - "$RUN/train.json" "$RUN/evaluate-retrained.json" <<'PY'
import json, sys
t, e = (json.load(open(p)) for p in sys.argv[1:])
print(f"  trained in {t['training_seconds']} s; its held-back MAE P_l={e['mae_p_loss']:.4f}, coverage {e['coverage_90_p_loss']:.1%}")
PY

# A local cluster on the host (the dev venv's CLI), the image's `up` in monitor mode against it.
kafka_dir="$RUN/kafka"
"$CLI" kafka start --data-dir "$kafka_dir" >"$RUN/kafka-start.txt"
"$CLI" kafka status --data-dir "$kafka_dir" >"$RUN/kafka-status.txt" || true
bootstrap=$(grep -oE '127\.0\.0\.1:[0-9]+' "$RUN/kafka-start.txt" "$RUN/kafka-status.txt" | head -1 | cut -d: -f2-)
up_pid=""
cleanup() {
  [ -n "$up_pid" ] && "${PODMAN[@]}" stop -t 60 kafka-audit-up >/dev/null 2>&1 || true
  "${PODMAN[@]}" rm -f kafka-audit-up >/dev/null 2>&1 || true
  "$CLI" kafka stop --data-dir "$kafka_dir" >/dev/null 2>&1 || true
}
trap cleanup EXIT
log "local cluster at $bootstrap"
metrics_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$RUN/shared/up.toml" <<EOF
data_dir = "/var/lib/kafka-audit/up"
window_ms = 5000
consumer_grace_ms = 2000
spark_grace_ms = 8000
watermark_delay_ms = 2000
trigger_ms = 2000
discovery_interval_ms = 2000
metrics_port = $metrics_port
EOF
topic="container.orders"
log "kafka-audit up -b $bootstrap --topic 'container\\..*' (monitor mode, in the image)"
t_up=$SECONDS
"${PODMAN[@]}" run -d --name kafka-audit-up --network host -v "$RUN/shared:/shared" -e COLUMNS=160 "$IMAGE" \
  kafka-audit up -b "$bootstrap" --topic 'container\..*' --config /shared/up.toml \
  --json-out /shared/results.jsonl --no-retrain --control off >/dev/null
up_pid=started
for _ in $(seq 120); do  # until `kafka-audit status` (in the container) finds the running instance
  "${PODMAN[@]}" exec kafka-audit-up kafka-audit status --json >"$RUN/status.json" 2>/dev/null && break
  sleep 2
done
SECONDS_OF[up_registered]=$((SECONDS - t_up))
log "up registered after ${SECONDS_OF[up_registered]} s: $(head -c 300 "$RUN/status.json")"
log "kafka-audit produce --topic $topic --count 3000 --rate 200 (in the image)"
timed produce in_image kafka-audit produce -b "$bootstrap" --topic "$topic" --count 3000 --rate 200 \
  --duration 60 --window-ms 5000 -X message.timeout.ms=10000 >"$RUN/produce.txt" 2>&1
finals() { [ -f "$RUN/shared/results.jsonl" ] && python3 - "$RUN/shared/results.jsonl" "$topic" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rows = [r for r in rows if r.get("topic") == sys.argv[2]]
print(sum(r.get("sent") or 0 for r in rows), sum(r.get("unique") or 0 for r in rows), len(rows))
PY
}
for _ in $(seq 90); do
  read -r sent unique windows < <(finals || echo "0 0 0")
  [ "$sent" = 3000 ] && [ "$unique" = 3000 ] && break
  sleep 2
done
SECONDS_OF[up_to_final]=$((SECONDS - t_up))
log "final windows of $topic: $windows, sent $sent, unique $unique (up started ${SECONDS_OF[up_to_final]} s ago)"
"${PODMAN[@]}" stop -t 90 kafka-audit-up >/dev/null
up_rc=$("${PODMAN[@]}" inspect kafka-audit-up --format '{{.State.ExitCode}}')
"${PODMAN[@]}" logs kafka-audit-up >"$RUN/up.out" 2>"$RUN/up.err" || true
up_pid=""
log "up exited $up_rc on SIGTERM; its closing table:"
grep -E 'container\.orders|unaudited|window' "$RUN/up.out" | tail -12 || true
python3 - "$RUN/shared/results.jsonl" "$topic" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip() and json.loads(l).get("topic") == sys.argv[2]]
for r in rows:
    print(f"  window {r['window_start_ms']}: sent {r['sent']} unique {r['unique']} lost {r.get('lost')} "
          f"dup {r.get('duplicates')} loss_rate {r.get('loss_rate')}")
assert sum(r["sent"] for r in rows) == 3000 and all(r["unique"] == r["sent"] for r in rows), "not exact"
PY
[ "$up_rc" = 0 ]

log "timings (s): $(for k in "${!SECONDS_OF[@]}"; do printf '%s=%s ' "$k" "${SECONDS_OF[$k]}"; done)"
log "image size: $((size / 1000000)) MB; results in $RUN"
log "OK: the image evaluates, retrains and audits in monitor mode"
