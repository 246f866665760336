# Sourced by the tests that run a program inside a memory cgroup without
# swap (tests/interpose/container_wall_test.sh,
# tests/engines/llama.cpp/container_wall_test.sh). The sourcing script sets
# test_name first. Defines:
#   skip MSG            exit 77 (ctest's SKIP_RETURN_CODE), or fail under CI=true
#   fail MSG            "<test_name>: FAIL: MSG", exit 1
#   make_wall NAME BYTES  a memory cgroup of BYTES without swap (v1 where the
#                       memory controller is mounted so, else v2), removed
#                       at exit; sets wall_dir and wall_source (the stats'
#                       wall_source: 2 for v1, 3 for v2). Needs root.
#   in_wall CMD...      runs CMD inside it; its exit status

skip() {
  if [[ ${CI:-} == true ]]; then
    echo "$test_name: FAIL: CI=true, and this machine lacks what the test needs: $1"
    exit 1
  fi
  echo "$test_name: SKIP: $1"
  exit 77
}
fail() {
  echo "$test_name: FAIL: $1"
  exit 1
}

make_wall() {
  local name=$1 bytes=$2
  [[ $(id -u) == 0 ]] || skip "not root (it makes a memory cgroup)"
  if [[ -f /sys/fs/cgroup/memory/memory.limit_in_bytes ]]; then
    wall_dir=/sys/fs/cgroup/memory/$name
    mkdir "$wall_dir" || skip "cannot make $wall_dir"
    echo "$bytes" >"$wall_dir/memory.limit_in_bytes" || skip "cannot limit $wall_dir"
    # No swap: where swap is accounted, memory + swap is the same wall;
    # elsewhere the cgroup's swappiness 0 keeps its pages out of swap.
    [[ -f $wall_dir/memory.memsw.limit_in_bytes ]] &&
      echo "$bytes" >"$wall_dir/memory.memsw.limit_in_bytes"
    echo 0 >"$wall_dir/memory.swappiness" 2>/dev/null
    wall_source=2
  elif grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
    grep -qw memory /sys/fs/cgroup/cgroup.subtree_control ||
      echo +memory >/sys/fs/cgroup/cgroup.subtree_control || skip "cannot enable memory in v2"
    wall_dir=/sys/fs/cgroup/$name
    mkdir "$wall_dir" || skip "cannot make $wall_dir"
    echo "$bytes" >"$wall_dir/memory.max" || skip "cannot limit $wall_dir"
    echo 0 >"$wall_dir/memory.swap.max" 2>/dev/null
    wall_source=3
  else
    skip "no memory cgroup (v1 or v2) is mounted"
  fi
}

in_wall() {
  bash -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$wall_dir" "$@"
}
