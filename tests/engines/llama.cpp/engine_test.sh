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
# and unchanged.
#
#   engine_test.sh --preload LIST [--env K=V]...
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
preload=""
extra_env=()
while (($#)); do
  case $1 in
    --preload) preload=$2; shift 2 ;;
    --env) extra_env+=("$2"); shift 2 ;;
    *) echo "engine_test: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -n $preload ]] || { echo "engine_test: --preload is required" >&2; exit 2; }
if [[ ! -f $here/node_modules/node-llama-cpp/package.json ]] || ! command -v node >/dev/null; then
  echo "engine_test: FAIL: llama.cpp is not installed (node and tests/engines/llama.cpp/node_modules); run scripts/setup-deps" >&2
  exit 1
fi

work=$(mktemp -d /tmp/kvtier-engine-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
failed=0

# run NAME MODEL DRIVER_ARGS... : the driver without and with the preload.
run_case() {
  local name=$1 model=$2
  shift 2
  local driver=(node "$here/chat_driver.mjs" --model "$model" "$@")
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
env "${extra_env[@]}" KVTIER_PAGE_SIZE=3M LD_PRELOAD="$preload" node -e 'console.log("ran")' \
  >"$work/bad.out" 2>"$work/bad.err" || rc=$?
if [[ $rc -ne 2 ]] || ! grep -q '^kvtier: KVTIER_PAGE_SIZE=3M' "$work/bad.err" || [[ -s $work/bad.out ]]; then
  echo "engine_test: FAIL: KVTIER_PAGE_SIZE=3M under the preload: exit $rc, want 2 and one line:" >&2
  cat "$work/bad.out" "$work/bad.err" >&2
  failed=1
else
  echo "engine_test: the preload is live in node: KVTIER_PAGE_SIZE=3M stops it: $(head -1 "$work/bad.err")"
fi

python3 "$here/random_gguf.py" "$work/mha.gguf" --layers 4 --embd 256 --heads 4 --seed 1
python3 "$here/random_gguf.py" "$work/gqa.gguf" --layers 4 --embd 256 --heads 8 --kv-heads 2 \
  --ctx 8192 --seed 2
run_case mha "$work/mha.gguf" --sessions 3 --turns 2 --ctx 1024 --prompt-tokens 120 --answer-tokens 8
run_case gqa "$work/gqa.gguf" --sessions 2 --turns 2 --ctx 4096 --prompt-tokens 600 \
  --answer-tokens 8 --no-mmap
if ((failed)); then exit 1; fi
echo "engine_test: PASS"
