#!/usr/bin/env bash
# A real Prometheus scraping kvtier-exporter while the demo engine runs
# under the preload on the simulated GPU. Checks, through Prometheus's HTTP
# API, that every PromQL query docs/metrics.md lists under "Useful queries"
# returns a series of the engine, with a sane value, and that
# `promtool check metrics` accepts the exporter's output. Fails (never
# skips) when prometheus or promtool is missing: scripts/setup-deps
# installs them.
#
#   prometheus_test.sh --exporter BIN --engine BIN --preload LIST --doc FILE [--env K=V]...
set -euo pipefail

exporter="" engine="" preload="" doc=""
engine_env=()
while (($#)); do
  case $1 in
    --exporter) exporter=$2; shift 2 ;;
    --engine) engine=$2; shift 2 ;;
    --preload) preload=$2; shift 2 ;;
    --doc) doc=$2; shift 2 ;;
    --env) engine_env+=("$2"); shift 2 ;;
    *) echo "prometheus_test: unknown argument $1" >&2; exit 2 ;;
  esac
done
for tool in prometheus promtool curl python3; do
  if ! command -v "$tool" >/dev/null; then
    echo "prometheus_test: FAIL: $tool is not installed (scripts/setup-deps installs it)" >&2
    exit 1
  fi
done

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "prometheus_test: FAIL: $*" >&2
  for f in "$work"/*.log; do
    [[ -s $f ]] && { echo "--- $f" >&2; tail -n 20 "$f" >&2; }
  done
  exit 1
}
# Waits up to $1 seconds for the command after it to succeed.
wait_for() {
  local limit=$1; shift
  local end=$((SECONDS + limit))
  until "$@"; do
    ((SECONDS < end)) || return 1
    sleep 0.2  # polling an outside server; nothing here holds a race open
  done
}
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# The exporter, on a port of its own choosing (its first line says which).
mkdir -p "$work/stats"
"$exporter" --listen 127.0.0.1:0 --dir "$work/stats" >"$work/exporter.log" 2>&1 &
pids+=($!)
wait_for 10 grep -q "127.0.0.1:" "$work/exporter.log" || fail "the exporter did not say where it listens"
exporter_addr=$(grep -o "127.0.0.1:[0-9]*" "$work/exporter.log" | head -n 1)

# Prometheus, scraping it every second.
cat >"$work/prometheus.yml" <<YML
global:
  scrape_interval: 1s
scrape_configs:
  - job_name: kvtier
    static_configs:
      - targets: ['$exporter_addr']
YML
promtool check config "$work/prometheus.yml" >"$work/promtool-config.log" 2>&1 ||
  fail "promtool rejects the scrape configuration"
prom_port=$(free_port)
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
  --web.listen-address="127.0.0.1:$prom_port" --log.level=warn >"$work/prometheus.log" 2>&1 &
pids+=($!)
api="http://127.0.0.1:$prom_port/api/v1"
query() { curl -sf --max-time 5 "$api/query" --data-urlencode "query=$1"; }
target_up() { query 'up{job="kvtier"} == 1' | grep -q '"value"'; }
wait_for 60 target_up || fail "Prometheus never scraped the exporter"

# The engine: 64 MiB of KV through a 16 MiB device budget, several turns,
# so faults and moves go on for a few scrapes; it holds when done.
release="$work/release"
env LD_PRELOAD="$preload" KVTIER_BACKEND=sim KVTIER_DEVICE_BUDGET=16M KVTIER_PAGE_SIZE=64K \
  KVTIER_MATCH=size\>=16M KVTIER_STATS_DIR="$work/stats" "${engine_env[@]}" \
  "$engine" --layers 4 --kv-bytes 64M --block-kib 64 --sessions 16 --max-active 2 --turns 6 \
  --weights 1 --weight-mib 1 --hold "$release" >"$work/engine.log" 2>&1 &
engine_pid=$!
pids+=($engine_pid)
engine_held() { grep -q "chat_engine: holding until" "$work/engine.log"; }
wait_for 120 engine_held || fail "the engine did not finish its turns"

# promtool on what the exporter serves now.
curl -sf --max-time 5 "http://$exporter_addr/metrics" >"$work/metrics.txt" ||
  fail "cannot read the exporter's /metrics"
promtool check metrics <"$work/metrics.txt" >"$work/promtool-metrics.log" 2>&1 ||
  fail "promtool check metrics: $(cat "$work/promtool-metrics.log")"
echo "promtool check metrics: OK ($(grep -c '^kvtier_' "$work/metrics.txt") samples)"

# Two more scrapes after the engine is done, so every rate window holds
# the samples after its last change.
samples() {
  query "count_over_time(kvtier_faults_total{pid=\"$engine_pid\"}[1m])" |
    python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(int(float(r[0]["value"][1])) if r else 0)'
}
scraped_after() { (($(samples) >= $1)); }
held_at=$(samples)
wait_for 30 scraped_after $((held_at + 2)) || fail "Prometheus stopped scraping (at $(samples) samples)"

# The page's queries, as written there.
mapfile -t queries < <(python3 - "$doc" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
start = text.index("Useful queries:")
para = text[start:text.index("\n\n", start)]
for q in re.findall(r"`([^`]+)`", para):
    print(" ".join(q.split()))  # a query may wrap across lines
PY
)
((${#queries[@]} >= 4)) || fail "found ${#queries[@]} queries in $doc, expected at least 4"
for q in "${queries[@]}"; do
  answer=$(query "$q") || fail "Prometheus refused the documented query $q"
  verdict=$(python3 - "$q" "$engine_pid" "$answer" <<'PY'
import json, math, sys
q, pid, answer = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
if answer.get("status") != "success":
    print("FAIL status " + str(answer.get("status"))); sys.exit()
series = [r for r in answer["data"]["result"] if r["metric"].get("pid") == pid]
if not series:
    print("FAIL no series of the engine (pid %s) in %d" % (pid, len(answer["data"]["result"]))); sys.exit()
m, v = series[0]["metric"], float(series[0]["value"][1])
if m.get("command") != "chat_engine":
    print("FAIL command label %r" % m.get("command")); sys.exit()
if math.isnan(v) or math.isinf(v) or v < 0:
    print("FAIL value %r" % v); sys.exit()
if q.startswith("rate(kvtier_faults_total") and v <= 0:
    print("FAIL no faults per second while the engine ran"); sys.exit()
if "/ kvtier_device_budget_bytes" in q and not 0 < v <= 1:
    print("FAIL device use outside (0, 1]: %r" % v); sys.exit()
print("ok %.6g" % v)
PY
)
  echo "query $q -> $verdict"
  [[ $verdict == ok* ]] || fail "documented query $q: $verdict"
done
touch "$release"
wait "$engine_pid" || fail "the engine exited with status $?"
echo "prometheus_test: OK (${#queries[@]} documented queries answered by Prometheus $(prometheus --version 2>&1 | head -n 1 | awk '{print $3}'))"
