#!/usr/bin/env bash
# container_wall_test.sh LIBKVTIER PROBE
#
# A CPU engine in a container: host_heap_probe with a 48 MiB heap block in a
# memory cgroup of 40 MiB without swap (v1 where the memory controller is
# mounted so, else v2). Without kvtier the kernel OOM-kills it: the wall is
# real. Under KVTIER_BACKEND=host with an SSD tier and KVTIER_HOST_BUDGET
# unset, the automatic budget follows the cgroup's wall: the probe finishes
# with every word intact, kvtier spilled, and the stats file names the wall.
# Needs root and a memory cgroup: exit 77 (skipped) without them, a failure
# under CI=true.
set -u
lib=$1 probe=$2
wall=$((40 << 20))
name=kvtier-wall-$$
tmp=$(mktemp -d /var/tmp/kvtier-wall.XXXXXX)

test_name=container_wall_test
source "$(dirname "$0")/../testing/memory_wall_cgroup.sh"
trap 'rmdir "${wall_dir:-/nonexistent}" 2>/dev/null; rm -rf "$tmp"' EXIT
make_wall "$name" $wall

args=(--blocks 1 --block-mib 48 --rounds 2 --threads 1 --rounds-only)

in_wall "$probe" "${args[@]}" >"$tmp/plain.out" 2>&1
rc=$?
[[ $rc == 137 ]] || fail "without kvtier the probe was not OOM-killed (status $rc): the wall is not real"
echo "container_wall_test: without kvtier: killed (status $rc)"

in_wall env LD_PRELOAD="$lib" KVTIER_BACKEND=host KVTIER_DISK_BUDGET=256M \
  KVTIER_DISK_DIR="$tmp" KVTIER_MATCH='size>=4M' KVTIER_STATS=0 KVTIER_SHOW_STATS=1 \
  KVTIER_VERBOSE=1 KVTIER_STATS_FILE="$tmp/stats.json" \
  "$probe" "${args[@]}" >"$tmp/kvtier.out" 2>&1
rc=$?
grep -E "automatic budget|memory wall|resident memory|host_heap_probe" "$tmp/kvtier.out"
[[ $rc == 0 ]] || { cat "$tmp/kvtier.out"; fail "under kvtier's automatic budget the probe ended with status $rc"; }
grep -q "host_heap_probe: OK" "$tmp/kvtier.out" || fail "the probe did not say OK"
python3 - "$tmp/stats.json" $wall $wall_source <<'EOF' || fail "the stats file does not show the wall followed"
import json, sys
c = json.load(open(sys.argv[1]))["counters"]
wall, source = int(sys.argv[2]), int(sys.argv[3])
ok = c["wall_bytes"] == wall and c["wall_source"] == source and c["spilled_pages"] > 0 \
    and c["restored_pages"] > 0
ok = ok and c["device_budget_bytes"] + c["host_budget_bytes"] < wall
print(f"container_wall_test: wall {c['wall_bytes']} (source {c['wall_source']}), budget "
      f"{c['device_budget_bytes'] + c['host_budget_bytes']}, spilled {c['spilled_pages']} pages, "
      f"restored {c['restored_pages']}")
sys.exit(0 if ok else 1)
EOF
echo "container_wall_test: PASS"
