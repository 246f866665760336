// ModelDevice: channels, faults, prefetches, demotions and driver eviction
// on the virtual clock.
#include "tools/bench/model_device.h"

#include <gtest/gtest.h>

#include <vector>

namespace kvtier {
namespace {

constexpr size_t kPage = 2 << 20;

ModelCosts Costs(uint64_t device_pages) {
  ModelCosts c;
  c.device_bytes = device_pages * kPage;
  c.host_bytes = 1000 * kPage;
  c.disk_bytes = 1000 * kPage;
  c.h2d_bps = 2e9;  // 2 MiB in 1.048576 ms
  c.d2h_bps = 2e9;
  c.fault_bps = 1e9;  // half as fast
  c.fault_batch_ns = 10'000;
  c.fault_batch_blocks = 1;
  c.ssd_read_bps = 1e9;
  c.ssd_write_bps = 1e9;
  c.ssd_latency_ns = 5'000;
  return c;
}
constexpr uint64_t kCopyNs = 1'048'576;   // one page at 2 GB/s
constexpr uint64_t kFaultNs = 2'097'152;  // one page at 1 GB/s

struct Recorder : DeviceEvents {
  std::vector<Tier> faults;
  int evictions = 0;
  void OnFault(Region&, uint32_t, Tier from, uint64_t) override { faults.push_back(from); }
  void OnDriverEviction(Region&, uint32_t) override { ++evictions; }
};

Tier TierOf(const Region& r, uint32_t p) { return r.pages[p].tier.load(); }

TEST(ModelDevice, FirstTouchPopulatesWithoutACopy) {
  Recorder ev;
  ModelDevice d(Costs(4), &ev);
  RegionPtr r = d.CreateRegion(1, 4 * kPage, kPage, "t").value();
  uint32_t pages[] = {0, 1};
  EXPECT_EQ(d.Touch(*r, pages, 2), 2 * 10'000u);  // two batches of service latency
  EXPECT_EQ(TierOf(*r, 0), Tier::kDevice);
  EXPECT_EQ(d.resident_bytes(), 2 * kPage);
  EXPECT_EQ(d.stats().first_touches, 2u);
  EXPECT_EQ(d.stats().h2d_fault_bytes, 0u);
  EXPECT_EQ(ev.faults, (std::vector<Tier>{Tier::kUntouched, Tier::kUntouched}));
  d.AdvanceTo(100'000);
  EXPECT_EQ(d.Touch(*r, pages, 2), 100'000u);  // resident: no wait
}

TEST(ModelDevice, DemoteThenFaultCostsTheCopyAndTheFaultedMigration) {
  Recorder ev;
  ModelDevice d(Costs(4), &ev);
  RegionPtr r = d.CreateRegion(1, 4 * kPage, kPage, "t").value();
  uint32_t p0 = 0;
  (void)d.Touch(*r, &p0, 1);
  d.AdvanceTo(1'000'000);
  ASSERT_TRUE(d.Demote(*r, 0).ok());
  EXPECT_EQ(d.resident_bytes(), 0u);  // leaving
  EXPECT_TRUE(r->pages[0].flags.load() & kPageInFlight);
  d.AdvanceTo(1'000'000 + kCopyNs);
  EXPECT_EQ(TierOf(*r, 0), Tier::kHost);
  EXPECT_EQ(d.host_used_bytes(), kPage);
  const uint64_t t = d.now_ns();
  EXPECT_EQ(d.Touch(*r, &p0, 1), t + 10'000 + kFaultNs);
  EXPECT_EQ(d.stats().h2d_fault_bytes, kPage);
  EXPECT_EQ(d.host_used_bytes(), 0u);
  EXPECT_EQ(ev.faults.back(), Tier::kHost);
}

TEST(ModelDevice, PrefetchIsFasterThanAFaultAndTouchWaitsForIt) {
  ModelDevice d(Costs(4), nullptr);
  RegionPtr r = d.CreateRegion(1, 4 * kPage, kPage, "t").value();
  uint32_t p0 = 0;
  (void)d.Touch(*r, &p0, 1);
  ASSERT_TRUE(d.Demote(*r, 0).ok());
  d.AdvanceTo(kCopyNs * 2);
  ASSERT_TRUE(d.Promote(*r, 0).ok());
  EXPECT_EQ(d.resident_bytes(), kPage);                   // on its way up counts
  EXPECT_EQ(d.Touch(*r, &p0, 1), kCopyNs * 2 + kCopyNs);  // no fault: waits for the copy
  EXPECT_EQ(d.stats().faults, 0u);
  d.AdvanceTo(kCopyNs * 3);
  EXPECT_EQ(TierOf(*r, 0), Tier::kDevice);
  EXPECT_FALSE(r->pages[0].flags.load() & kPageInFlight);
}

TEST(ModelDevice, TransfersOnOneChannelQueueInOrder) {
  ModelDevice d(Costs(8), nullptr);
  RegionPtr r = d.CreateRegion(1, 8 * kPage, kPage, "t").value();
  uint32_t all[] = {0, 1, 2};
  (void)d.Touch(*r, all, 3);
  for (uint32_t p : all) ASSERT_TRUE(d.Demote(*r, p).ok());
  EXPECT_EQ(d.busy_until_ns(), 3 * kCopyNs);  // three copies back to back from now (0)
}

TEST(ModelDevice, FullDeviceWaitsForADemotionOrEvictsLeastRecentlyMigrated) {
  Recorder ev;
  ModelDevice d(Costs(2), &ev);
  RegionPtr r = d.CreateRegion(1, 4 * kPage, kPage, "t").value();
  uint32_t first[] = {0, 1};
  (void)d.Touch(*r, first, 2);
  // A demotion in progress frees its frame when its copy ends.
  ASSERT_TRUE(d.Demote(*r, 1).ok());
  uint32_t p2 = 2;
  EXPECT_EQ(d.Touch(*r, &p2, 1), kCopyNs);  // the copy that frees the frame ends then
  EXPECT_EQ(ev.evictions, 0);
  EXPECT_EQ(TierOf(*r, 1), Tier::kHost);
  // None in progress: the driver evicts page 0, migrated longest ago.
  uint32_t p3 = 3;
  (void)d.Touch(*r, &p3, 1);
  EXPECT_EQ(ev.evictions, 1);
  EXPECT_EQ(TierOf(*r, 0), Tier::kHost);
  EXPECT_EQ(TierOf(*r, 2), Tier::kDevice);
  EXPECT_EQ(d.stats().d2h_evict_bytes, kPage);
  EXPECT_LE(d.resident_bytes(), 2 * kPage);
}

TEST(ModelDevice, TouchDuringDemotionWaitsThenMigratesBack) {
  ModelDevice d(Costs(4), nullptr);
  RegionPtr r = d.CreateRegion(1, 4 * kPage, kPage, "t").value();
  uint32_t p0 = 0;
  (void)d.Touch(*r, &p0, 1);
  ASSERT_TRUE(d.Demote(*r, 0).ok());
  const uint64_t ready = d.Touch(*r, &p0, 1);
  EXPECT_EQ(ready, kCopyNs + kFaultNs);  // the copy down finishes, then the migration back
  EXPECT_EQ(d.stats().aborted_demotions, 1u);
  d.AdvanceTo(ready);
  EXPECT_EQ(TierOf(*r, 0), Tier::kDevice);  // the finished demotion does not apply
  EXPECT_EQ(d.host_used_bytes(), 0u);
}

TEST(ModelDevice, SpillAndRestoreFromDisk) {
  ModelDevice d(Costs(4), nullptr);
  RegionPtr r = d.CreateRegion(1, 4 * kPage, kPage, "t").value();
  uint32_t p0 = 0;
  (void)d.Touch(*r, &p0, 1);
  ASSERT_TRUE(d.Demote(*r, 0).ok());
  d.AdvanceTo(kCopyNs * 2);
  ASSERT_TRUE(d.Spill(*r, 0).ok());
  d.AdvanceTo(kCopyNs * 2 + 5'000 + kFaultNs);
  EXPECT_EQ(TierOf(*r, 0), Tier::kDisk);
  EXPECT_EQ(d.disk_used_bytes(), kPage);
  EXPECT_EQ(d.host_used_bytes(), 0u);
  const uint64_t t = d.now_ns();
  // Read from the SSD (latency + 2 MiB at 1 GB/s), then the faulted migration.
  EXPECT_EQ(d.Touch(*r, &p0, 1), t + 10'000 + 5'000 + kFaultNs + kFaultNs);
  EXPECT_EQ(d.stats().disk_read_bytes, kPage);
  EXPECT_EQ(d.disk_used_bytes(), 0u);
}

TEST(ModelDevice, SsdLatencyIsPerTwoMibOfIoNotPerPage) {
  // 64 KiB pages pay a 32nd of the 2 MiB request's setup each: spilling and
  // restoring 32 of them costs what one 2 MiB page does.
  constexpr size_t kSmall = 64 << 10;
  ModelCosts c = Costs(64);
  c.ssd_latency_ns = 64'000;
  ModelDevice d(c, nullptr);
  RegionPtr r = d.CreateRegion(1, 32 * kSmall, kSmall, "t").value();
  std::vector<uint32_t> pages(32);
  for (uint32_t i = 0; i < 32; ++i) pages[i] = i;
  (void)d.Touch(*r, pages.data(), pages.size());
  for (uint32_t p : pages) ASSERT_TRUE(d.Demote(*r, p).ok());
  d.AdvanceTo(d.now_ns() + 10 * kCopyNs);
  const uint64_t before = d.now_ns();
  for (uint32_t p : pages) ASSERT_TRUE(d.Spill(*r, p).ok());
  // 32 writes of 64 KiB at 1 GB/s, 2'000 ns of setup each.
  const uint64_t write_ns = 32 * (2'000 + 65'536);
  d.AdvanceTo(before + write_ns - 1);
  EXPECT_EQ(TierOf(*r, 31), Tier::kHost);  // the last write is still on its way
  d.AdvanceTo(before + write_ns);
  EXPECT_EQ(TierOf(*r, 31), Tier::kDisk);
  EXPECT_EQ(d.disk_used_bytes(), 32 * kSmall);
}

TEST(ModelDevice, FaultLatencyIsPerVaBlockNotPerPage) {
  // 64 KiB pages: 32 share a 2 MiB VA block, and the driver services a
  // block's faults together, one service latency for all of them.
  constexpr size_t kSmall = 64 << 10;
  ModelCosts c = Costs(4);
  Recorder ev;
  ModelDevice d(c, &ev);
  RegionPtr r = d.CreateRegion(1, 2 * kPage, kSmall, "t").value();
  EXPECT_EQ(r->base % kPage, 0u);  // managed allocations start on a block
  std::vector<uint32_t> pages;
  for (uint32_t p = 0; p < 40; ++p) pages.push_back(p);  // 32 in block 0, 8 in block 1
  EXPECT_EQ(d.Touch(*r, pages.data(), pages.size()), 2 * 10'000u);
  EXPECT_EQ(d.stats().fault_batches, 2u);
  EXPECT_EQ(ev.faults.size(), 40u);
  // Two blocks per batch: the same 40 first touches cost one latency.
  c.fault_batch_blocks = 2;
  ModelDevice d2(c, nullptr);
  RegionPtr r2 = d2.CreateRegion(1, 2 * kPage, kSmall, "t").value();
  EXPECT_EQ(d2.Touch(*r2, pages.data(), pages.size()), 10'000u);
  EXPECT_EQ(d2.stats().fault_batches, 1u);
}

TEST(ModelDevice, RefusesWhatItCannotDo) {
  ModelCosts c = Costs(4);
  c.disk_bytes = 0;
  c.host_bytes = kPage;
  ModelDevice d(c, nullptr);
  EXPECT_FALSE(d.CreateRegion(1, kPage, 3 << 20, "t").ok());  // not a power of two
  RegionPtr r = d.CreateRegion(1, 4 * kPage, kPage, "t").value();
  EXPECT_FALSE(d.CreateRegion(1, kPage, kPage, "t").ok());  // id in use
  uint32_t all[] = {0, 1};
  (void)d.Touch(*r, all, 2);
  EXPECT_TRUE(d.Demote(*r, 0).ok());
  EXPECT_TRUE(d.Demote(*r, 1).ok());  // the host budget is the policy's to keep
  d.AdvanceTo(10 * kCopyNs);
  EXPECT_EQ(d.stats().host_peak_bytes, 2 * kPage);  // above it: reported
  EXPECT_TRUE(d.Promote(*r, 1).ok());
  d.AdvanceTo(20 * kCopyNs);
  EXPECT_FALSE(d.Spill(*r, 0).ok());   // no disk tier
  EXPECT_TRUE(d.Promote(*r, 3).ok());  // never touched: populated on the device
  EXPECT_EQ(TierOf(*r, 3), Tier::kDevice);
  EXPECT_EQ(d.stats().populated, 1u);
  d.DestroyRegion(*r);
  EXPECT_EQ(d.resident_bytes(), 0u);
  EXPECT_EQ(d.host_used_bytes(), 0u);
}

}  // namespace
}  // namespace kvtier
