// Counters: the process's live statistics, one atomic per row of
// include/kvtier/stats_fields.def.
//
// Any thread may add to a counter or set a gauge (relaxed atomics: cheap,
// no ordering promised between fields). The policy thread copies them into
// the shared-memory stats segment each tick (stats_segment.h).
#pragma once

#include <atomic>
#include <cstdint>

#include "runtime/page_table.h"

namespace kvtier {

struct Counters {
#define KVTIER_STAT(name, kind, doc) std::atomic<uint64_t> name{0};
#include "kvtier/stats_fields.def"
#undef KVTIER_STAT

  static void Add(std::atomic<uint64_t>& c, uint64_t n = 1) {
    c.fetch_add(n, std::memory_order_relaxed);
  }
  static void Sub(std::atomic<uint64_t>& c, uint64_t n = 1) {
    c.fetch_sub(n, std::memory_order_relaxed);
  }
  static void Set(std::atomic<uint64_t>& c, uint64_t v) { c.store(v, std::memory_order_relaxed); }
  static uint64_t Get(const std::atomic<uint64_t>& c) { return c.load(std::memory_order_relaxed); }
  // Raises a peak gauge to at least v.
  static void Max(std::atomic<uint64_t>& c, uint64_t v) {
    uint64_t cur = c.load(std::memory_order_relaxed);
    while (cur < v && !c.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
    }
  }
};

// Adds (or, add=false, removes) `bytes` on the used-bytes gauge of `tier`,
// raising device_peak_bytes as device residency grows and
// resident_peak_bytes as the device and host tiers together do (what the
// host backend's KVTIER_HOST_BUDGET bounds). The one place the
// backends book a page changing tier; kUntouched holds no bytes.
inline void AccountTierBytes(Counters& c, Tier tier, uint64_t bytes, bool add) {
  std::atomic<uint64_t>* gauge = nullptr;
  switch (tier) {
    case Tier::kDevice:
      gauge = &c.device_used_bytes;
      break;
    case Tier::kHost:
      gauge = &c.host_used_bytes;
      break;
    case Tier::kDisk:
      gauge = &c.disk_used_bytes;
      break;
    case Tier::kUntouched:
      return;
  }
  if (!add) {
    Counters::Sub(*gauge, bytes);
    return;
  }
  const uint64_t now = gauge->fetch_add(bytes, std::memory_order_relaxed) + bytes;
  if (tier == Tier::kDevice) Counters::Max(c.device_peak_bytes, now);
  if (tier != Tier::kDisk) {
    Counters::Max(c.resident_peak_bytes, c.device_used_bytes.load(std::memory_order_relaxed) +
                                             c.host_used_bytes.load(std::memory_order_relaxed));
  }
}

}  // namespace kvtier
