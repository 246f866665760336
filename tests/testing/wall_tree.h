// A fake tree of /proc and cgroup files for the memory wall
// (runtime/memory_wall.h): a directory that plays "/" for ReadMemoryWall.
// Thread-safety: a test's own.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/storage/storage_test_util.h"

namespace kvtier::testing {

// cgroup v1's "unlimited" (PAGE_COUNTER_MAX pages of 4 KiB).
constexpr const char* kV1Unlimited = "9223372036854771712";

class FakeTree {
 public:
  FakeTree() : dir_("/tmp") {}
  const std::string& root() const { return dir_.path(); }
  // Written whole and renamed into place: a runtime's policy thread may
  // read the file meanwhile, and must never see it half written.
  void Write(const std::string& path, const std::string& text) {
    const std::string full = root() + path;
    std::filesystem::create_directories(std::filesystem::path(full).parent_path());
    std::ofstream(full + ".new") << text;
    std::filesystem::rename(full + ".new", full);
  }
  void Remove(const std::string& path) { std::filesystem::remove(root() + path); }
  // A machine of 16 GiB with 12 GiB available, and swap_free_kib of swap free.
  void Machine(uint64_t total_kib = 16 << 20, uint64_t available_kib = 12 << 20,
               uint64_t swap_free_kib = 0) {
    Write("/proc/meminfo",
          "MemTotal:       " + std::to_string(total_kib) +
              " kB\nMemFree:         1000 kB\nMemAvailable:   " + std::to_string(available_kib) +
              " kB\nSwapTotal:      " + std::to_string(swap_free_kib) +
              " kB\nSwapFree:       " + std::to_string(swap_free_kib) + " kB\n");
  }
  // A cgroup v1 machine: the memory controller at /sys/fs/cgroup/memory, the
  // process in `path`.
  void V1(const std::string& path, const std::string& mount_root = "/") {
    Write("/proc/self/cgroup", "12:pids:/\n4:memory:" + path + "\n1:cpu,cpuacct:/\n0::/\n");
    Write("/proc/self/mountinfo",
          "25 1 0:23 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n"
          "26 25 0:24 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"
          "34 25 0:31 " +
              mount_root + " /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n");
  }
  void V1Level(const std::string& dir, const std::string& limit, uint64_t usage,
               uint64_t inactive_file = 0, uint64_t inactive_anon = 0) {
    const std::string d = "/sys/fs/cgroup/memory" + dir;
    Write(d + "/memory.limit_in_bytes", limit + "\n");
    Write(d + "/memory.usage_in_bytes", std::to_string(usage) + "\n");
    Write(d + "/memory.stat", "cache 0\nrss 0\ninactive_anon 1\ntotal_inactive_anon " +
                                  std::to_string(inactive_anon) + "\ntotal_inactive_file " +
                                  std::to_string(inactive_file) + "\ntotal_active_file 0\n");
  }
  // A cgroup v2 machine: the unified hierarchy at /sys/fs/cgroup.
  void V2(const std::string& path) {
    Write("/proc/self/cgroup", "0::" + path + "\n");
    Write("/proc/self/mountinfo",
          "25 1 0:23 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n");
  }
  void V2Level(const std::string& dir, const std::string& max, const std::string& high,
               uint64_t current, uint64_t inactive_file = 0, uint64_t inactive_anon = 0) {
    const std::string d = "/sys/fs/cgroup" + dir;
    Write(d + "/memory.max", max + "\n");
    Write(d + "/memory.high", high + "\n");
    Write(d + "/memory.current", std::to_string(current) + "\n");
    Write(d + "/memory.stat", "anon 0\nfile 0\ninactive_anon " + std::to_string(inactive_anon) +
                                  "\ninactive_file " + std::to_string(inactive_file) +
                                  "\nactive_file 0\n");
  }

 private:
  storage_test::TempDir dir_;
};

}  // namespace kvtier::testing
