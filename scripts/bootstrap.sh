#!/usr/bin/env bash
# Idempotent setup for kafka-audit: Debian packages, the Python virtualenv, the JVM jars.
# Everything heavy is cached outside the clone under $KAFKA_AUDIT_CACHE (default ~/.cache/kafka-audit),
# keyed by the dependency list (pyproject.toml) and by jvm/pom.xml, so a rerun or a fresh clone is fast.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE="${KAFKA_AUDIT_CACHE:-$HOME/.cache/kafka-audit}"
mkdir -p "$CACHE"
log() { printf '\033[1m[bootstrap]\033[0m %s\n' "$*" >&2; }

# 1. Debian packages: the JDK 17 (Kafka, Spark), Maven (jars), iproute2/iptables/ping + libnetfilter-queue
#    (testbed), Prometheus/Alertmanager (alerts, dashboards tests), Chromium (report screenshot test), kcat (an
#    uninstrumented producer: the unaudited-traffic test), librdkafka-dev (rdkafka.h for the librdkafka plugin).
APT_PACKAGES=(openjdk-17-jdk-headless maven iproute2 iptables iputils-ping build-essential python3.11-dev
  libnetfilter-queue-dev prometheus prometheus-alertmanager chromium kcat librdkafka-dev)
missing=()
for p in "${APT_PACKAGES[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then
  if [ "$(id -u)" -ne 0 ]; then log "missing Debian packages: ${missing[*]} (run as root or install them)"; exit 1; fi
  log "installing Debian packages: ${missing[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# 2. Python virtualenv, keyed by the dependency list.
PY="${PYTHON:-python3.11}"
deps_key=$("$PY" - <<'PYEOF'
import hashlib, tomllib
p = tomllib.load(open("pyproject.toml", "rb"))["project"]
lab = [d for d in tomllib.load(open("lab/pyproject.toml", "rb"))["project"]["dependencies"] if d != "kafka-audit"]
text = "\n".join(sorted(p["dependencies"] + lab) + sorted(p["optional-dependencies"]["dev"]) + [p["requires-python"]])
print(hashlib.sha256(text.encode()).hexdigest()[:16])
PYEOF
)
VENV="$CACHE/venv-$deps_key"
if [ ! -f "$VENV/.complete" ]; then
  log "creating virtualenv $VENV (first run downloads torch and pyspark: several minutes)"
  rm -rf "$VENV"
  "$PY" -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip setuptools wheel
  "$VENV/bin/python" - <<'PYEOF' > "$VENV/requirements.txt"
import tomllib
p = tomllib.load(open("pyproject.toml", "rb"))["project"]
lab = [d for d in tomllib.load(open("lab/pyproject.toml", "rb"))["project"]["dependencies"] if d != "kafka-audit"]
print("\n".join(p["dependencies"] + p["optional-dependencies"]["dev"] + lab))
PYEOF
  "$VENV/bin/pip" install -q -r "$VENV/requirements.txt"
  touch "$VENV/.complete"
fi
ln -sfn "$VENV" .venv
# The product and the lab (lab/): editable installs pointing at this clone (no dependency resolution, ~4 s).
# The lab's entry points register `kafka-audit testbed ...` and `kafka-audit soak ...`.
# setuptools warns on every such install that the compat mode is transitional: shown only if pip fails.
if ! pip_out=$(.venv/bin/pip install -q --no-deps --no-build-isolation --config-settings editable_mode=compat \
    -e . -e lab 2>&1); then
  echo "$pip_out" >&2
  exit 1
fi

# 3. The runtime virtualenv: the product's locked runtime dependencies (requirements.lock, `make lock`) and
#    nothing else, keyed by the lock. tests/install/ installs the wheel non-editable into a fresh venv that
#    reaches these packages through a .pth file (as users install: the wheel + the lock); first build ~2 min.
lock_key=$(sha256sum requirements.lock | cut -c1-16)
RUNTIME="$CACHE/venv-runtime-$lock_key"
if [ ! -f "$RUNTIME/.complete" ]; then
  log "creating the runtime virtualenv $RUNTIME from requirements.lock"
  rm -rf "$RUNTIME"
  "$PY" -m venv "$RUNTIME"
  "$RUNTIME/bin/pip" install -q -r requirements.lock
  touch "$RUNTIME/.complete"
fi
ln -sfn "$RUNTIME" "$CACHE/venv-runtime"

# 4. JVM jars from Maven Central, keyed by the pom: the broker (kafka), Spark's Kafka connector (spark),
#    the Prometheus JMX exporter java agent the local brokers run with (jmx-exporter), MirrorMaker 2 (mirror).
pom_key=$(sha256sum jvm/pom.xml | cut -c1-16)
for profile in kafka spark jmx-exporter mirror; do
  dir="$CACHE/jars-$profile-$pom_key"
  if [ ! -f "$dir/.complete" ]; then
    log "fetching $profile jars into $dir"
    rm -rf "$dir"; mkdir -p "$dir"
    mvn -q -B -s jvm/settings.xml -f jvm/pom.xml -P "$profile" dependency:copy-dependencies \
      -DoutputDirectory="$dir" -DexcludeScope=provided -DincludeScope=runtime
    touch "$dir/.complete"
  fi
  ln -sfn "$dir" "$CACHE/jars-$profile"
done
# 5. The JVM interceptors (jvm/interceptors: kafka-audit-interceptors-<version>.jar, Avro and RoaringBitmap shaded),
#    keyed by the module's sources and the audit record schema the build copies into the jar. JUnit runs in
#    `make test`, not here.
interceptors_key=$(cat jvm/interceptors/pom.xml audit_record/audit_record.avsc \
  $(find jvm/interceptors/src/main -type f | sort) | sha256sum | cut -c1-16)
dir="$CACHE/jars-interceptors-$interceptors_key"
if [ ! -f "$dir/.complete" ]; then
  log "building the JVM interceptors into $dir"
  rm -rf "$dir"; mkdir -p "$dir"
  mvn -q -B -s jvm/settings.xml -f jvm/interceptors/pom.xml package -DskipTests
  cp jvm/interceptors/target/kafka-audit-interceptors-0.1.0.jar "$dir/"
  touch "$dir/.complete"
fi
ln -sfn "$dir" "$CACHE/jars-interceptors"
# 6. The librdkafka plugin (rdkafka_plugin: librdkafka-audit-plugin.so, audits librdkafka clients by
#    plugin.library.paths), keyed by its sources and the audit record schema its Avro field program is
#    generated from. It links no librdkafka: it uses the copy the client loaded.
plugin_key=$(cat audit_record/audit_record.avsc $(find rdkafka_plugin -type f \( -name '*.[ch]' -o -name Makefile \
  -o -name '*.py' \) -not -path '*/build/*' | sort) | sha256sum | cut -c1-16)
dir="$CACHE/rdkafka-plugin-$plugin_key"
if [ ! -f "$dir/.complete" ]; then
  log "building the librdkafka plugin into $dir"
  rm -rf "$dir"; mkdir -p "$dir"
  make -s -C rdkafka_plugin OUT="$dir" PYTHON="$VENV/bin/python" >&2
  touch "$dir/.complete"
fi
ln -sfn "$dir" "$CACHE/rdkafka-plugin"
log "ready: venv $VENV, runtime venv $RUNTIME, jars in $CACHE/jars-kafka, $CACHE/jars-spark, $CACHE/jars-jmx-exporter, $CACHE/jars-mirror and $CACHE/jars-interceptors; librdkafka plugin in $CACHE/rdkafka-plugin"
