#!/usr/bin/env bash
# kvtier-top and kvtier-exporter show a KVTIER_BACKEND=host process as
# backend host, with its tiered blocks and the pages it has on SSD, while
# host_heap_probe --hold keeps them alive; kvtier-top and the summary say it
# in the host backend's words (mapped, staging, SSD), never a GPU's.
#   host_tools_test.sh PRELOAD PROBE KVTIER_TOP KVTIER_EXPORTER
set -euo pipefail
preload=$1 probe=$2 top=$3 exporter=$4
work=$(mktemp -d /tmp/kvtier-host-tools.XXXXXX)
pid=""
cleanup() {
  [[ -n $pid ]] && kill "$pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
mkdir "$work/stats" "$work/spill"
mkfifo "$work/in"
KVTIER_SHOW_STATS=1 KVTIER_BACKEND=host KVTIER_HOST_BUDGET=4M KVTIER_DISK_BUDGET=256M KVTIER_MATCH='size>=4M' \
  KVTIER_DISK_DIR="$work/spill" KVTIER_STATS_DIR="$work/stats" LD_PRELOAD="$preload" \
  "$probe" --blocks 4 --block-mib 4 --rounds 1 --threads 1 --hold <"$work/in" >"$work/out" \
  2>"$work/err" &
pid=$!
exec 3>"$work/in"
for _ in $(seq 600); do
  grep -q "holding" "$work/out" && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
grep -q "holding" "$work/out" || { echo "host_tools_test: FAIL: the probe never held:"; cat "$work/out" "$work/err"; exit 1; }
json=$("$top" --json --dir "$work/stats")
metrics=$("$exporter" --once --dir "$work/stats")
once=$("$top" --once --dir "$work/stats")
echo >&3
exec 3>&-
wait "$pid" || { echo "host_tools_test: FAIL: the probe failed:"; cat "$work/out" "$work/err"; exit 1; }
pid=""
fail=0
check() {  # check WHAT TEXT REGEX
  if ! grep -Eq "$3" <<<"$2"; then
    echo "host_tools_test: FAIL: $1 does not match /$3/:"
    echo "$2" | head -40
    fail=1
  fi
}
check "kvtier-top --json" "$json" '"backend":"host"'
check "kvtier-top --json" "$json" '"regions":[1-9]'
check "kvtier-top --json" "$json" '"disk_used_bytes":[1-9]'
check "kvtier-top --once" "$once" ' host +lru'
check "kvtier-exporter --once" "$metrics" 'kvtier_info\{[^}]*backend="host"'
check "kvtier-exporter --once" "$metrics" '^kvtier_disk_used_bytes\{[^}]*\} [1-9]'
check "the probe" "$(cat "$work/out")" 'host_heap_probe: OK'
check "kvtier-top --once" "$once" '^Mapped +\['
check "kvtier-top --once" "$once" '^Staging +\['
check "kvtier-top --once" "$once" '^SSD +\['
check "kvtier-top --once" "$once" 'MAPPED +STAGING +SSD'
check "kvtier-exporter --once" "$metrics" '# HELP kvtier_device_used_bytes .*host backend: mapped'
check "the summary" "$(cat "$work/err")" 'kvtier summary \(pid [0-9]+, backend host'
no_gpu_words() {  # no_gpu_words WHAT TEXT
  if grep -Eiq 'gpu|device|driver' <<<"$2"; then
    echo "host_tools_test: FAIL: $1 speaks of a GPU to a host-backend process:"
    grep -Ein 'gpu|device|driver' <<<"$2" | head -10
    fail=1
  fi
}
no_gpu_words "kvtier-top --once" "$once"
no_gpu_words "the summary" "$(sed -n '/kvtier summary/,$p' "$work/err")"
((fail == 0)) && echo "host_tools_test: PASS: kvtier-top and kvtier-exporter show backend host, its blocks and its pages on SSD"
exit $fail
