// A synthetic kvtier process for the tool tests (see synthetic.h).
#include "tests/tools/synthetic.h"

#include <memory>

namespace kvtier::testing {

SyntheticProcess::SyntheticProcess() {
  using S = Synthetic;
  // Three regions like an engine's per-layer KV pools, and a small one.
  regions_.push_back(std::make_shared<Region>(1, 0x7f1000000000, 128 * S::kPageSize, S::kPageSize,
                                              "alloc#3 libchat.so"));
  regions_.push_back(std::make_shared<Region>(2, 0x7f2000000000, 64 * S::kPageSize, S::kPageSize,
                                              "alloc#4 libchat.so"));
  regions_.push_back(std::make_shared<Region>(3, 0x7f3000000000, 5 * S::kPageSize - 4096,
                                              S::kPageSize, "alloc#9"));
}

void SyntheticProcess::Step(uint64_t k) {
  using S = Synthetic;
  Counters& c = counters_;
  Counters::Set(c.device_budget_bytes, S::kDeviceBudget);
  Counters::Set(c.device_used_bytes, S::kDeviceUsed);
  Counters::Set(c.device_peak_bytes, S::kDeviceUsed + 512 * S::kMiB);
  Counters::Set(c.host_budget_bytes, S::kHostBudget);
  Counters::Set(c.host_used_bytes, S::kHostUsed);
  Counters::Set(c.disk_budget_bytes, S::kDiskBudget);
  Counters::Set(c.disk_used_bytes, S::kDiskUsed);
  Counters::Set(c.regions, regions_.size());
  uint64_t region_bytes = 0;
  for (const RegionPtr& r : regions_) region_bytes += r->size;
  Counters::Set(c.region_bytes, region_bytes);
  Counters::Set(c.plain_device_bytes, 1 * S::kGiB);
  Counters::Set(c.allocations, 40);
  Counters::Set(c.matched_allocations, regions_.size());
  Counters::Set(c.frees, 2);
  Counters::Set(c.demoted_bytes, k * S::kDemotedBytes);
  Counters::Set(c.demoted_pages, k * S::kDemotedBytes / S::kPageSize);
  Counters::Set(c.promoted_bytes, k * S::kPromotedBytes);
  Counters::Set(c.promoted_pages, k * S::kPromotedBytes / S::kPageSize);
  Counters::Set(c.spilled_bytes, k * S::kSpilledBytes);
  Counters::Set(c.spilled_pages, k * S::kSpilledBytes / S::kPageSize);
  Counters::Set(c.restored_bytes, k * S::kRestoredBytes);
  Counters::Set(c.restored_pages, k * S::kRestoredBytes / S::kPageSize);
  Counters::Set(c.faults, k * S::kFaults);
  Counters::Set(c.fault_bytes, k * S::kFaults * S::kPageSize);
  Counters::Set(c.fault_ns, k * S::kFaults * 160000);
  Counters::Set(c.refaults, k);
  Counters::Set(c.spill_errors, k / S::kSpillErrorEvery);
  Counters::Set(c.signals, k * 100);
  Counters::Set(c.policy_ticks, k);
  Counters::Set(c.policy_ns, k * 12000);

  // Region 1: device-resident head, host middle, a spilled band, an
  // untouched tail; the hot band moves with k. Region 2: all on the host,
  // cooling. Region 3: untouched but for one device page.
  const RegionPtr& r1 = regions_[0];
  for (size_t p = 0; p < r1->pages.size(); ++p) {
    const Tier t = p < 48    ? Tier::kDevice
                   : p < 96  ? Tier::kHost
                   : p < 112 ? Tier::kDisk
                             : Tier::kUntouched;
    r1->pages[p].tier.store(t);
    const size_t hot = (k * 4) % 48;
    r1->pages[p].heat = p >= hot && p < hot + 8 ? 200 : p < 48 ? 4 : p < 96 ? 1 : 0;
  }
  const RegionPtr& r2 = regions_[1];
  for (size_t p = 0; p < r2->pages.size(); ++p) {
    r2->pages[p].tier.store(Tier::kHost);
    r2->pages[p].heat = static_cast<uint32_t>(p / 8);
  }
  regions_[2]->pages[0].tier.store(Tier::kDevice);
  regions_[2]->pages[0].heat = 16;
}

}  // namespace kvtier::testing
