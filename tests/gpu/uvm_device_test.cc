// The CUDA backend (runtime/device/cuda/uvm_device.h) on a fake driver: no
// GPU needed. The fake's managed memory is host memory; its prefetch and
// advice calls are recorded. Checks region creation, moves on the backend's
// lowest-priority stream, the device budget (room made before a promote,
// headroom for the engine, pages faulted in beyond it sent back), how CUPTI
// unified-memory records change page tiers and reach the runtime, the
// decoding of those records, and that a fork child refuses to touch the
// parent's CUDA state.
#include "runtime/device/cuda/uvm_device.h"

#include <cupti_activity.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "tests/testing/fake_cuda_driver.h"

namespace kvtier::cuda {
namespace {

constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kPage = 2 * kMiB;

struct Events : DeviceEvents {
  std::mutex mu;
  std::vector<std::pair<uint32_t, Tier>> faults;  // (page, from)
  std::vector<uint32_t> evictions;
  void OnFault(Region&, uint32_t page, Tier from, uint64_t) override {
    std::lock_guard<std::mutex> l(mu);
    faults.push_back({page, from});
  }
  void OnDriverEviction(Region&, uint32_t page) override {
    std::lock_guard<std::mutex> l(mu);
    evictions.push_back(page);
  }
};

class UvmDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fake::Reset(1, size_t{64} << 30);
    UvmDeviceConfig config;
    config.api = fake::Api(/*batch_calls=*/false);
    config.device = 0;
    config.budget.all = 4 * kMiB;  // two pages
    config.page_size = kPage;
    config.events = &events_;
    config.counters = &counters_;
    config.use_cupti = false;
    config.maintenance_ms = 100000;  // the tests call Maintain themselves
    auto made = UvmDevice::Create(config);
    ASSERT_TRUE(made.ok()) << made.status().message();
    dev_ = std::move(made).value();
  }

  Tier TierOf(const RegionPtr& r, uint32_t page) {
    return r->pages[page].tier.load(std::memory_order_relaxed);
  }
  void Deliver(std::initializer_list<UvmEvent> events) {
    std::vector<UvmEvent> v(events);
    dev_->OnUvmEvents(v.data(), v.size());
  }
  static UvmEvent Event(UvmEvent::Kind kind, uint64_t address, uint64_t bytes,
                        UvmEvent::Cause cause = UvmEvent::Cause::kUnknown) {
    UvmEvent e;
    e.kind = kind;
    e.address = address;
    e.bytes = bytes;
    e.cause = cause;
    e.start_ns = 1000;
    e.end_ns = 51000;
    return e;
  }

  Events events_;
  Counters counters_;
  std::unique_ptr<UvmDevice> dev_;
};

TEST_F(UvmDeviceTest, RegionsAreManagedMemoryOfWholePages) {
  auto r = dev_->CreateRegion(1, 5 * kMiB, kPage, "alloc#3 libtest.so");
  ASSERT_TRUE(r.ok()) << r.status().message();
  RegionPtr region = r.value();
  EXPECT_EQ(region->size, 5 * kMiB);
  EXPECT_EQ(region->pages.size(), 3u);
  EXPECT_EQ(region->base % kPage, 0u);
  EXPECT_NE(region->backend, nullptr);
  EXPECT_EQ(TierOf(region, 2), Tier::kUntouched);
  EXPECT_STREQ(dev_->kind(), "cuda");
  EXPECT_EQ(dev_->capacity_bytes(), 4 * kMiB);
  EXPECT_EQ(fake::State().allocated, 1);
  // The migration stream has the lowest priority the device offers.
  EXPECT_EQ(fake::State().stream_priority, 0);
  dev_->DestroyRegion(*region);
  EXPECT_EQ(fake::State().freed, 1);
  EXPECT_EQ(region->backend, nullptr);
}

TEST_F(UvmDeviceTest, PromoteAndDemoteMoveOnePageOnTheBackendStream) {
  RegionPtr region = dev_->CreateRegion(1, 6 * kMiB, kPage, "kv").value();
  ASSERT_TRUE(dev_->Promote(*region, 1).ok());
  EXPECT_EQ(TierOf(region, 1), Tier::kDevice);
  ASSERT_EQ(fake::State().prefetches.size(), 1u);
  EXPECT_EQ(fake::State().prefetches[0].ptr, region->base + kPage);
  EXPECT_EQ(fake::State().prefetches[0].bytes, kPage);
  EXPECT_EQ(fake::State().prefetches[0].device, 0);
  EXPECT_EQ(fake::State().prefetches[0].stream, fake::StreamOf(0));
  ASSERT_FALSE(fake::State().advice.empty());
  EXPECT_EQ(fake::State().advice.back().advice, CU_MEM_ADVISE_SET_PREFERRED_LOCATION);
  EXPECT_EQ(dev_->resident_bytes(), kPage);
  EXPECT_EQ(Counters::Get(counters_.promoted_pages), 1u);
  EXPECT_EQ(Counters::Get(counters_.device_used_bytes), kPage);

  ASSERT_TRUE(dev_->Promote(*region, 1).ok());  // resident: nothing to do
  EXPECT_EQ(fake::State().prefetches.size(), 1u);

  ASSERT_TRUE(dev_->Demote(*region, 1).ok());
  EXPECT_EQ(TierOf(region, 1), Tier::kHost);
  ASSERT_EQ(fake::State().prefetches.size(), 2u);
  EXPECT_EQ(fake::State().prefetches[1].device, -1);
  EXPECT_EQ(fake::State().advice.back().advice, CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION);
  EXPECT_EQ(dev_->resident_bytes(), 0u);
  EXPECT_EQ(Counters::Get(counters_.demoted_pages), 1u);
  EXPECT_EQ(Counters::Get(counters_.host_used_bytes), kPage);
  ASSERT_TRUE(dev_->Demote(*region, 0).ok());  // untouched: nothing to do
  EXPECT_EQ(fake::State().prefetches.size(), 2u);
  EXPECT_FALSE(dev_->Promote(*region, 3).ok());  // no such page
}

TEST_F(UvmDeviceTest, PromoteMakesRoomWithinTheCapacity) {
  RegionPtr region = dev_->CreateRegion(1, 8 * kMiB, kPage, "kv").value();
  for (uint32_t p = 0; p < 4; ++p) {
    ASSERT_TRUE(dev_->Promote(*region, p).ok());
    EXPECT_LE(dev_->resident_bytes(), dev_->capacity_bytes());
  }
  // Capacity two pages: pages 0 and 1 went back, oldest first.
  EXPECT_EQ(TierOf(region, 0), Tier::kHost);
  EXPECT_EQ(TierOf(region, 1), Tier::kHost);
  EXPECT_EQ(TierOf(region, 2), Tier::kDevice);
  EXPECT_EQ(TierOf(region, 3), Tier::kDevice);
  EXPECT_EQ(Counters::Get(counters_.driver_evictions), 2u);
  EXPECT_EQ(events_.evictions, (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(Counters::Get(counters_.device_peak_bytes), 4 * kMiB);
}

TEST_F(UvmDeviceTest, PromoteLeavesHeadroomForTheEngine) {
  RegionPtr region = dev_->CreateRegion(1, 2 * kMiB, kPage, "kv").value();
  fake::State().free_bytes[0] = 100 * kMiB;  // less than the 256 MiB headroom
  Status s = dev_->Promote(*region, 0);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("kept free for the engine"), std::string::npos) << s.message();
  EXPECT_NE(TierOf(region, 0), Tier::kDevice);
  EXPECT_TRUE(fake::State().prefetches.empty());
}

TEST_F(UvmDeviceTest, FaultRecordsMakePagesResidentAndReachTheRuntime) {
  RegionPtr region = dev_->CreateRegion(1, 6 * kMiB, kPage, "kv").value();
  Deliver({Event(UvmEvent::Kind::kGpuFault, region->base + kPage + 100, 0)});
  EXPECT_EQ(TierOf(region, 1), Tier::kDevice);
  // The driver's own migration record for the same page is not a second fault.
  Deliver(
      {Event(UvmEvent::Kind::kToDevice, region->base + kPage, kPage, UvmEvent::Cause::kCoherence)});
  // A migration the backend asked for (cause user) is not a fault either.
  Deliver(
      {Event(UvmEvent::Kind::kToDevice, region->base + 2 * kPage, kPage, UvmEvent::Cause::kUser)});
  EXPECT_NE(TierOf(region, 2), Tier::kDevice);
  // A fault-driven migration record that spans two pages.
  Deliver({Event(UvmEvent::Kind::kToDevice, region->base, 2 * kPage, UvmEvent::Cause::kCoherence)});
  EXPECT_EQ(TierOf(region, 0), Tier::kDevice);
  ASSERT_EQ(events_.faults.size(), 2u);
  EXPECT_EQ(events_.faults[0], (std::pair<uint32_t, Tier>{1, Tier::kUntouched}));
  EXPECT_EQ(events_.faults[1], (std::pair<uint32_t, Tier>{0, Tier::kUntouched}));
  EXPECT_EQ(Counters::Get(counters_.faults), 2u);
  EXPECT_EQ(Counters::Get(counters_.fault_bytes), 2 * kPage);
  EXPECT_EQ(Counters::Get(counters_.fault_ns), 2 * 50000u);
  EXPECT_EQ(dev_->resident_bytes(), 2 * kPage);
}

TEST_F(UvmDeviceTest, DriverEvictionsMovePagesToTheHost) {
  RegionPtr region = dev_->CreateRegion(1, 4 * kMiB, kPage, "kv").value();
  ASSERT_TRUE(dev_->Promote(*region, 0).ok());
  Deliver({Event(UvmEvent::Kind::kToHost, region->base, kPage, UvmEvent::Cause::kEviction)});
  EXPECT_EQ(TierOf(region, 0), Tier::kHost);
  EXPECT_EQ(events_.evictions, std::vector<uint32_t>{0});
  EXPECT_EQ(Counters::Get(counters_.driver_evictions), 1u);
  EXPECT_EQ(dev_->resident_bytes(), 0u);
}

TEST_F(UvmDeviceTest, MaintainSendsPagesFaultedInBeyondTheCapacityBack) {
  RegionPtr region = dev_->CreateRegion(1, 6 * kMiB, kPage, "kv").value();
  for (uint32_t p = 0; p < 3; ++p)
    Deliver({Event(UvmEvent::Kind::kGpuFault, region->PageAddr(p), 0)});
  EXPECT_EQ(dev_->resident_bytes(), 6 * kMiB);  // the driver put them there
  dev_->Maintain();
  EXPECT_EQ(dev_->resident_bytes(), 4 * kMiB);
  EXPECT_EQ(TierOf(region, 0), Tier::kHost);  // the least recently migrated
  EXPECT_EQ(fake::State().prefetches.back().device, -1);
}

TEST_F(UvmDeviceTest, RecordsElsewhereAndThrashingChangeNoPage) {
  RegionPtr region = dev_->CreateRegion(1, 2 * kMiB, kPage, "kv").value();
  Deliver({Event(UvmEvent::Kind::kGpuFault, region->base + 64 * kMiB, 0),
           Event(UvmEvent::Kind::kGpuFault, 4096, 0),
           Event(UvmEvent::Kind::kThrashing, region->base, kPage)});
  EXPECT_EQ(TierOf(region, 0), Tier::kUntouched);
  EXPECT_EQ(dev_->thrashing_reports(), 1u);
  EXPECT_TRUE(events_.faults.empty());
}

TEST_F(UvmDeviceTest, DestroyingARegionReturnsItsBytesToTheBooks) {
  RegionPtr region = dev_->CreateRegion(1, 4 * kMiB, kPage, "kv").value();
  ASSERT_TRUE(dev_->Promote(*region, 0).ok());
  ASSERT_TRUE(dev_->Promote(*region, 1).ok());
  ASSERT_TRUE(dev_->Demote(*region, 1).ok());
  dev_->DestroyRegion(*region);
  EXPECT_EQ(dev_->resident_bytes(), 0u);
  EXPECT_EQ(Counters::Get(counters_.device_used_bytes), 0u);
  EXPECT_EQ(Counters::Get(counters_.host_used_bytes), 0u);
  // A record for the freed range is ignored.
  Deliver({Event(UvmEvent::Kind::kGpuFault, region->base, 0)});
  EXPECT_TRUE(events_.faults.empty());
}

TEST_F(UvmDeviceTest, AForkChildRefusesTheParentsCudaState) {
  RegionPtr region = dev_->CreateRegion(1, 2 * kMiB, kPage, "kv").value();
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    dev_->AfterForkInChild();
    Status s = dev_->Promote(*region, 0);
    bool ok = !s.ok() && s.message().find("fork child") != std::string::npos &&
              !dev_->CreateRegion(2, kPage, kPage, "x").ok() && fake::State().prefetches.empty();
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_TRUE(dev_->Promote(*region, 0).ok());  // the parent is unaffected
}

TEST(CuptiRecords, DecodeTheUnifiedMemoryCounters) {
  CUpti_ActivityUnifiedMemoryCounter3 r{};
  r.kind = CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER;
  r.counterKind = CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_GPU_PAGE_FAULT;
  r.address = 0x7f0000200000;
  r.start = 10;
  r.end = 30;
  UvmEvent e;
  ASSERT_TRUE(DecodeUvmRecord(&r, &e));
  EXPECT_EQ(e.kind, UvmEvent::Kind::kGpuFault);
  EXPECT_EQ(e.address, 0x7f0000200000u);
  EXPECT_EQ(e.end_ns - e.start_ns, 20u);

  r.counterKind = CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_DTOH;
  r.value = 2 << 20;
  r.flags = CUPTI_ACTIVITY_UNIFIED_MEMORY_MIGRATION_CAUSE_EVICTION;
  ASSERT_TRUE(DecodeUvmRecord(&r, &e));
  EXPECT_EQ(e.kind, UvmEvent::Kind::kToHost);
  EXPECT_EQ(e.bytes, 2u << 20);
  EXPECT_EQ(e.cause, UvmEvent::Cause::kEviction);

  r.counterKind = CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_HTOD;
  r.flags = CUPTI_ACTIVITY_UNIFIED_MEMORY_MIGRATION_CAUSE_USER;
  ASSERT_TRUE(DecodeUvmRecord(&r, &e));
  EXPECT_EQ(e.kind, UvmEvent::Kind::kToDevice);
  EXPECT_EQ(e.cause, UvmEvent::Cause::kUser);

  r.counterKind = CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_THRASHING;
  ASSERT_TRUE(DecodeUvmRecord(&r, &e));
  EXPECT_EQ(e.kind, UvmEvent::Kind::kThrashing);

  r.counterKind = CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_CPU_PAGE_FAULT_COUNT;
  EXPECT_FALSE(DecodeUvmRecord(&r, &e));
  r.kind = CUPTI_ACTIVITY_KIND_KERNEL;
  EXPECT_FALSE(DecodeUvmRecord(&r, &e));
}

}  // namespace
}  // namespace kvtier::cuda
