// A synthetic kvtier process for the tool tests: counters and regions whose
// values after step k are known exactly, published through the runtime's
// StatsSegment writer. Used in the test process itself and by
// stats_fake_publisher (the same data from another process).
// Thread-safety: one thread drives a SyntheticProcess.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/counters.h"
#include "runtime/page_table.h"

namespace kvtier::testing {

// Figures after step k (k >= 1).
struct Synthetic {
  static constexpr uint64_t kMiB = 1ull << 20;
  static constexpr uint64_t kGiB = 1ull << 30;
  static constexpr uint64_t kPageSize = 2 * kMiB;
  static constexpr uint64_t kDeviceBudget = 8 * kGiB;
  static constexpr uint64_t kDeviceUsed = 3 * kGiB;
  static constexpr uint64_t kHostBudget = 32 * kGiB;
  static constexpr uint64_t kHostUsed = 1536 * kMiB;
  static constexpr uint64_t kDiskBudget = 64 * kGiB;
  static constexpr uint64_t kDiskUsed = 512 * kMiB;
  // Per step.
  static constexpr uint64_t kDemotedBytes = 64 * kMiB;
  static constexpr uint64_t kPromotedBytes = 32 * kMiB;
  static constexpr uint64_t kSpilledBytes = 16 * kMiB;
  static constexpr uint64_t kRestoredBytes = 8 * kMiB;
  static constexpr uint64_t kFaults = 10;
  static constexpr uint64_t kSpillErrorEvery = 4;  // one spill error every 4 steps
};

class SyntheticProcess {
 public:
  SyntheticProcess();
  // Sets every counter to its value after step k and moves a band of hot
  // pages along the regions.
  void Step(uint64_t k);
  const Counters& counters() const { return counters_; }
  Counters& counters() { return counters_; }
  const std::vector<RegionPtr>& regions() const { return regions_; }

 private:
  Counters counters_;
  std::vector<RegionPtr> regions_;
};

}  // namespace kvtier::testing
