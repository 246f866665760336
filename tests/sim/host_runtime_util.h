// A whole host-backend runtime for tests: built from KVTIER_* values as the
// environment would give them, and a region's bytes written and read back
// through it. Thread-safety: test helpers, one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "runtime/options.h"
#include "runtime/runtime.h"
#include "start/bootstrap.h"

namespace kvtier::testing {

// KVTIER_* values of a host runtime that spills: 4 MiB of memory, 64 MiB of
// SSD in `disk_dir`, pages of 64 KiB, a tick every 2 ms, its stats segment
// published in `stats_dir`.
inline std::map<std::string, std::string> SpillingHostValues(const std::string& disk_dir,
                                                             const std::string& stats_dir) {
  return {{"KVTIER_HOST_BUDGET", "4M"},   {"KVTIER_DISK_BUDGET", "64M"},
          {"KVTIER_DISK_DIR", disk_dir},  {"KVTIER_PAGE_SIZE", "64K"},
          {"KVTIER_TICK_MS", "2"},        {"KVTIER_STATS", "1"},
          {"KVTIER_STATS_DIR", stats_dir}};
}

// The runtime KVTIER_BACKEND=host would start with `values` set; its memory
// wall read under `wall_root` ("": the live system's; a FakeTree's root).
inline Result<std::unique_ptr<Runtime>> MakeHostRuntime(
    const std::map<std::string, std::string>& values, const std::string& wall_root = "") {
  Result<Options> options = ParseOptions([&](const char* name) -> const char* {
    auto it = values.find(name);
    return it == values.end() ? nullptr : it->second.c_str();
  });
  if (!options.ok()) return options.status();
  Options effective = options.value();
  Runtime::Parts parts = SimParts();
  parts.wall_root = wall_root;
  if (Status s = HostBackendParts(options.value(), nullptr, &effective, &parts); !s.ok()) return s;
  return Runtime::Create(effective, parts);
}

// Writes one byte into every 4 KiB of [p, p + bytes), then reads them all
// back: with a budget smaller than `bytes`, pages leave for SSD on the way
// and come back. The first offset read back wrong, or -1.
inline int64_t WriteThenReadBack(uint8_t* p, size_t bytes) {
  for (size_t off = 0; off < bytes; off += 4096) p[off] = static_cast<uint8_t>(off >> 12 | 1);
  for (size_t off = 0; off < bytes; off += 4096) {
    if (p[off] != static_cast<uint8_t>(off >> 12 | 1)) return static_cast<int64_t>(off);
  }
  return -1;
}

}  // namespace kvtier::testing
