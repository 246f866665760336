// MemfdDevice semantics one operation at a time: faults from each tier, demote,
// promote, the simulated driver's eviction order, region shapes, teardown and
// errors. Concurrency, fork and timing live in sim_device_stress_test.cc.
#include <sys/mman.h>

#include <thread>

#include "runtime/device/memfd/memfd_device.h"
#include "tests/sim/sim_test_util.h"

namespace kvtier::testing {
namespace {

constexpr size_t kPage = 2 * kMiB;

TEST_F(SimDeviceTest, WriteDemoteAndReadBackFromAnotherThread) {
  auto dev = MakeDevice(8 * kPage);
  ASSERT_TRUE(dev);
  Result<RegionPtr> made = dev->CreateRegion(7, 4 * kPage, kPage, "kv-layer0");
  ASSERT_TRUE(made.ok()) << made.status().message();
  Region& r = *made.value();
  EXPECT_EQ(r.base % kPage, 0u) << "the engine view must be aligned to the page size";
  for (uint32_t p = 0; p < 4; ++p) EXPECT_EQ(TierOf(r, p), Tier::kUntouched);

  for (uint32_t p = 0; p < 4; ++p) WritePattern(PageBase(r, p), kPage, p);
  ASSERT_TRUE(events_.WaitForFaults(4));
  for (uint32_t p = 0; p < 4; ++p) {
    EXPECT_EQ(TierOf(r, p), Tier::kDevice);
    EXPECT_EQ(events_.faults()[p].from, Tier::kUntouched);
  }
  EXPECT_EQ(dev->resident_bytes(), 4 * kPage);

  for (uint32_t p = 0; p < 4; ++p) ASSERT_TRUE(dev->Demote(r, p).ok());
  for (uint32_t p = 0; p < 4; ++p) EXPECT_EQ(TierOf(r, p), Tier::kHost);
  EXPECT_EQ(dev->resident_bytes(), 0u);
  EXPECT_EQ(Get(counters_.device_used_bytes), 0u);
  EXPECT_EQ(Get(counters_.host_used_bytes), 4 * kPage);
  EXPECT_EQ(Get(counters_.demoted_pages), 4u);
  EXPECT_EQ(Get(counters_.demoted_bytes), 4 * kPage);
  // The bytes stayed in the memfd: the unregistered alias still reads them.
  EXPECT_EQ(CheckPattern(dev->AliasOf(r) + 2 * kPage, kPage, 2), -1);

  int64_t bad[4] = {0, 0, 0, 0};
  std::thread reader([&] {
    for (uint32_t p = 0; p < 4; ++p) bad[p] = CheckPattern(PageBase(r, p), kPage, p);
  });
  reader.join();
  for (uint32_t p = 0; p < 4; ++p) EXPECT_EQ(bad[p], -1) << "page " << p;
  ASSERT_TRUE(events_.WaitForFaults(8));
  std::vector<RecordingEvents::Fault> faults = events_.faults();
  for (size_t i = 4; i < 8; ++i) {
    EXPECT_EQ(faults[i].region, 7u);
    EXPECT_EQ(faults[i].page, i - 4);
    EXPECT_EQ(faults[i].from, Tier::kHost);
  }
  EXPECT_EQ(Get(counters_.faults), 8u);
  EXPECT_EQ(Get(counters_.fault_bytes), 8 * kPage);
  EXPECT_EQ(Get(counters_.device_used_bytes), 4 * kPage);
  EXPECT_EQ(Get(counters_.host_used_bytes), 0u);
  EXPECT_EQ(Get(counters_.driver_evictions), 0u);
  dev->DestroyRegion(r);
}

TEST_F(SimDeviceTest, UntouchedPagesReadZeroAndBecomeResident) {
  // Both ways of filling a never-touched page: UFFDIO_ZEROPAGE and
  // UFFDIO_COPY from zeros (the latter is the disk tier's restore path).
  for (bool copy_fill : {false, true}) {
    SCOPED_TRACE(copy_fill ? "UFFDIO_COPY" : "UFFDIO_ZEROPAGE");
    const size_t seen = events_.faults().size();
    const uint64_t used = Get(counters_.device_used_bytes);
    auto dev = MakeDevice(4 * kPage, 1, copy_fill);
    ASSERT_TRUE(dev);
    Result<RegionPtr> made = dev->CreateRegion(1, 2 * kPage, kPage, "zeros");
    ASSERT_TRUE(made.ok()) << made.status().message();
    Region& r = *made.value();
    auto* words = reinterpret_cast<const volatile uint64_t*>(PageBase(r, 1));
    uint64_t any = 0;
    for (size_t i = 0; i < kPage / 8; ++i) any |= words[i];
    EXPECT_EQ(any, 0u);
    ASSERT_TRUE(events_.WaitForFaults(seen + 1));
    EXPECT_EQ(events_.faults()[seen].page, 1u);
    EXPECT_EQ(events_.faults()[seen].from, Tier::kUntouched);
    EXPECT_EQ(TierOf(r, 1), Tier::kDevice);
    EXPECT_EQ(TierOf(r, 0), Tier::kUntouched);
    EXPECT_EQ(Get(counters_.device_used_bytes), used + kPage);
    EXPECT_EQ(Get(counters_.device_peak_bytes), kPage);

    // Zeros survive a round trip through the host tier too.
    ASSERT_TRUE(dev->Demote(r, 1).ok());
    any = 0;
    for (size_t i = 0; i < kPage / 8; ++i) any |= words[i];
    EXPECT_EQ(any, 0u);
    ASSERT_TRUE(events_.WaitForFaults(seen + 2));
    EXPECT_EQ(events_.faults()[seen + 1].from, Tier::kHost);
    dev->DestroyRegion(r);
  }
}

TEST_F(SimDeviceTest, PromoteMakesTheNextTouchFaultFree) {
  auto dev = MakeDevice(2 * kPage);  // one fault thread: reports come in order
  ASSERT_TRUE(dev);
  Result<RegionPtr> made = dev->CreateRegion(2, 4 * kPage, kPage, "prefetch");
  ASSERT_TRUE(made.ok()) << made.status().message();
  Region& r = *made.value();
  WritePattern(PageBase(r, 0), kPage, 40);
  ASSERT_TRUE(events_.WaitForFaults(1));
  ASSERT_TRUE(dev->Demote(r, 0).ok());

  ASSERT_TRUE(dev->Promote(r, 0).ok());  // from the host
  ASSERT_TRUE(dev->Promote(r, 1).ok());  // from untouched: zeros
  EXPECT_EQ(TierOf(r, 0), Tier::kDevice);
  EXPECT_EQ(TierOf(r, 1), Tier::kDevice);
  EXPECT_EQ(Get(counters_.promoted_pages), 2u);
  EXPECT_EQ(Get(counters_.promoted_bytes), 2 * kPage);
  EXPECT_TRUE(dev->Promote(r, 1).ok());  // resident: no-op
  EXPECT_EQ(Get(counters_.promoted_pages), 2u);

  EXPECT_EQ(CheckPattern(PageBase(r, 0), kPage, 40), -1);
  EXPECT_EQ(*reinterpret_cast<volatile uint64_t*>(PageBase(r, 1) + kPage - 8), 0u);
  // A fence: with one fault thread, a fault on page 2 is reported after any
  // fault the touches above raised.
  ASSERT_TRUE(dev->Demote(r, 1).ok());
  *reinterpret_cast<volatile uint64_t*>(PageBase(r, 1)) = 1;
  ASSERT_TRUE(events_.WaitForFaults(2));
  std::vector<RecordingEvents::Fault> faults = events_.faults();
  ASSERT_EQ(faults.size(), 2u) << "a promoted page faulted on touch";
  EXPECT_EQ(faults[1].page, 1u);
  EXPECT_EQ(Get(counters_.faults), 2u);
  dev->DestroyRegion(r);
}

TEST_F(SimDeviceTest, DriverEvictsTheLeastRecentlyMigratedPageNotTheLeastRecentlyUsed) {
  auto dev = MakeDevice(2 * kPage);
  ASSERT_TRUE(dev);
  Result<RegionPtr> made = dev->CreateRegion(3, 4 * kPage, kPage, "lrm");
  ASSERT_TRUE(made.ok()) << made.status().message();
  Region& r = *made.value();
  for (uint32_t p = 0; p < 2; ++p) WritePattern(PageBase(r, p), kPage, 100 + p);
  ASSERT_TRUE(events_.WaitForFaults(2));
  // Page 0 is now the most recently *used*, but still the oldest migrated.
  EXPECT_EQ(CheckPattern(PageBase(r, 0), kPage, 100), -1);
  WritePattern(PageBase(r, 2), kPage, 102);
  ASSERT_TRUE(events_.WaitForFaults(3));
  ASSERT_TRUE(events_.WaitForEvictions(1));
  EXPECT_EQ(events_.evictions()[0].page, 0u);
  EXPECT_EQ(TierOf(r, 0), Tier::kHost);
  EXPECT_EQ(Get(counters_.driver_evictions), 1u);

  // A prefetch into a full device evicts too (page 1 now).
  ASSERT_TRUE(dev->Promote(r, 3).ok());
  ASSERT_EQ(events_.evictions().size(), 2u);
  EXPECT_EQ(events_.evictions()[1].page, 1u);
  EXPECT_EQ(dev->resident_bytes(), 2 * kPage);
  EXPECT_EQ(Get(counters_.device_peak_bytes), 2 * kPage);
  for (uint32_t p = 0; p < 3; ++p) EXPECT_EQ(CheckPattern(PageBase(r, p), kPage, 100 + p), -1);
  EXPECT_LE(Get(counters_.device_peak_bytes), dev->capacity_bytes());
  dev->DestroyRegion(r);
}

TEST_F(SimDeviceTest, RegionWithAPartialLastPage) {
  constexpr size_t kSmall = 64 * kKiB;
  auto dev = MakeDevice(8 * kSmall);
  ASSERT_TRUE(dev);
  const size_t bytes = 2 * kSmall + 4 * kKiB + 24;  // three pages, the last short
  Result<RegionPtr> made = dev->CreateRegion(4, bytes, kSmall, "ragged");
  ASSERT_TRUE(made.ok()) << made.status().message();
  Region& r = *made.value();
  ASSERT_EQ(r.pages.size(), 3u);
  EXPECT_EQ(r.base % kSmall, 0u);
  EXPECT_EQ(r.PageBytes(2), 4 * kKiB + 24);
  auto* base = reinterpret_cast<uint8_t*>(r.base);
  WritePattern(base, bytes, 9);
  ASSERT_TRUE(events_.WaitForFaults(3));
  // The whole last page is resident (the view is whole pages).
  EXPECT_EQ(dev->resident_bytes(), 3 * kSmall);
  for (uint32_t p = 0; p < 3; ++p) ASSERT_TRUE(dev->Demote(r, p).ok());
  EXPECT_EQ(CheckPattern(base, bytes, 9), -1);
  ASSERT_TRUE(events_.WaitForFaults(6));
  EXPECT_EQ(events_.faults()[5].page, 2u);
  EXPECT_EQ(events_.faults()[5].from, Tier::kHost);
  dev->DestroyRegion(r);
}

TEST_F(SimDeviceTest, DestroyRegionReleasesEverything) {
  auto dev = MakeDevice(4 * kPage);
  ASSERT_TRUE(dev);
  Result<RegionPtr> made = dev->CreateRegion(5, 3 * kPage, kPage, "doomed");
  ASSERT_TRUE(made.ok()) << made.status().message();
  RegionPtr r = made.value();
  WritePattern(PageBase(*r, 0), kPage, 1);
  WritePattern(PageBase(*r, 1), kPage, 2);
  ASSERT_TRUE(events_.WaitForFaults(2));
  ASSERT_TRUE(dev->Demote(*r, 1).ok());
  EXPECT_EQ(Get(counters_.device_used_bytes), kPage);
  EXPECT_EQ(Get(counters_.host_used_bytes), kPage);

  dev->DestroyRegion(*r);
  EXPECT_EQ(r->backend, nullptr);
  EXPECT_EQ(dev->resident_bytes(), 0u);
  EXPECT_EQ(Get(counters_.device_used_bytes), 0u);
  EXPECT_EQ(Get(counters_.host_used_bytes), 0u);
  // The view is gone (msync on an unmapped range fails with ENOMEM).
  EXPECT_NE(msync(reinterpret_cast<void*>(r->base), kPage, MS_ASYNC), 0);
  EXPECT_FALSE(dev->Demote(*r, 0).ok());
  EXPECT_FALSE(dev->Promote(*r, 0).ok());
  dev->DestroyRegion(*r);  // twice: ignored

  // The device is still whole: a new region faults as usual.
  Result<RegionPtr> next = dev->CreateRegion(6, kPage, kPage, "next");
  ASSERT_TRUE(next.ok()) << next.status().message();
  WritePattern(PageBase(*next.value(), 0), kPage, 3);
  ASSERT_TRUE(events_.WaitForFaults(3));
  EXPECT_EQ(dev->resident_bytes(), kPage);
  dev->DestroyRegion(*next.value());
}

TEST_F(SimDeviceTest, RejectsBadArguments) {
  MemfdDeviceConfig zero;
  Result<std::unique_ptr<MemfdDevice>> none = MemfdDevice::Create(zero);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("capacity is 0"), std::string::npos);

  auto dev = MakeDevice(2 * kPage);
  ASSERT_TRUE(dev);
  EXPECT_FALSE(dev->CreateRegion(1, kPage, 3 * kMiB, "odd page").ok());
  EXPECT_FALSE(dev->CreateRegion(1, kPage, 1024, "tiny page").ok());
  Result<RegionPtr> big = dev->CreateRegion(1, 8 * kPage, 4 * kPage, "huge page");
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("exceeds the device capacity"), std::string::npos);
  EXPECT_FALSE(dev->CreateRegion(1, 0, kPage, "empty").ok());

  Result<RegionPtr> made = dev->CreateRegion(1, kPage, kPage, "one");
  ASSERT_TRUE(made.ok()) << made.status().message();
  Region& r = *made.value();
  EXPECT_TRUE(dev->Demote(r, 0).ok());  // untouched: no-op
  EXPECT_EQ(TierOf(r, 0), Tier::kUntouched);
  Status out = dev->Demote(r, 1);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.message().find("out of range"), std::string::npos);
  EXPECT_FALSE(dev->Promote(r, 1).ok());
  EXPECT_FALSE(dev->Spill(r, 0).ok());
  EXPECT_STREQ(dev->kind(), "sim");
  dev->DestroyRegion(r);
}

}  // namespace
}  // namespace kvtier::testing
