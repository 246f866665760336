// The CUDA backend with two GPUs in one process, on the fake driver (label
// cuda, no GPU needed): regions belong to the GPU whose context was current
// when they were allocated, each GPU gets its own context, stream and budget
// (KVTIER_DEVICE_BUDGET's per-GPU list, or nine tenths of its free memory),
// promotes and the maintenance pass make room on the page's own GPU only,
// and the stats see each GPU.
#include <gtest/gtest.h>

#include "runtime/device/cuda/uvm_device.h"
#include "runtime/device/cuda/uvm_event.h"
#include "tests/testing/fake_cuda_driver.h"

namespace kvtier::cuda {
namespace {

constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kGiB = size_t{1} << 30;
constexpr size_t kPage = 2 * kMiB;

class UvmMultiGpuTest : public ::testing::Test {
 protected:
  void SetUp() override { fake::Reset(2, 64 * kGiB); }
  void TearDown() override { dev_.reset(); }

  void Start(DeviceSizes budget) {
    UvmDeviceConfig config;
    config.api = fake::Api();
    config.device = 0;
    config.context = fake::ContextOf(0);  // as MakeCudaDevice retains it
    config.budget = std::move(budget);
    config.page_size = kPage;
    config.counters = &counters_;
    config.use_cupti = false;
    config.maintenance_ms = 100000;  // the tests call Maintain themselves
    auto made = UvmDevice::Create(config);
    ASSERT_TRUE(made.ok()) << made.status().message();
    dev_ = std::move(made).value();
  }
  // A region allocated while the engine has `gpu` current.
  RegionPtr RegionOn(int gpu, RegionId id, size_t bytes) {
    fake::State().engine_device = gpu;
    auto r = dev_->CreateRegion(id, bytes, kPage, "kv");
    EXPECT_TRUE(r.ok()) << r.status().message();
    return r.ok() ? r.value() : nullptr;
  }
  static Tier TierOf(const RegionPtr& r, uint32_t page) {
    return r->pages[page].tier.load(std::memory_order_relaxed);
  }
  uint64_t UsedOn(int gpu) {
    for (const Device::GpuUsage& u : dev_->gpus()) {
      if (u.ordinal == gpu) return u.used;
    }
    ADD_FAILURE() << "GPU " << gpu << " is not in use";
    return 0;
  }

  Counters counters_;
  std::unique_ptr<UvmDevice> dev_;
};

TEST_F(UvmMultiGpuTest, RegionsBelongToTheGpuCurrentWhenTheyWereAllocated) {
  Start(DeviceSizes{0, {{0, 4 * kMiB}, {1, 2 * kMiB}}});
  RegionPtr a = RegionOn(0, 1, 4 * kMiB);
  EXPECT_EQ(dev_->gpus().size(), 1u);  // GPU 1 is set up only once it is used
  RegionPtr b = RegionOn(1, 2, 6 * kMiB);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(fake::AllocationAt(a->base)->device, 0);
  EXPECT_EQ(fake::AllocationAt(b->base)->device, 1);
  const std::vector<Device::GpuUsage> gpus = dev_->gpus();
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0].ordinal, 0);
  EXPECT_EQ(gpus[0].budget, 4 * kMiB);
  EXPECT_EQ(gpus[1].ordinal, 1);
  EXPECT_EQ(gpus[1].budget, 2 * kMiB);
  EXPECT_EQ(dev_->capacity_bytes(), 6 * kMiB);
  EXPECT_EQ(Counters::Get(counters_.device_budget_bytes), 6 * kMiB);
  EXPECT_EQ(fake::State().retained, 1);  // GPU 1's; GPU 0's came with the config
  EXPECT_EQ(fake::State().streams, 2);
  dev_.reset();
  EXPECT_EQ(fake::State().streams, 0);
  EXPECT_EQ(fake::State().released, 2);  // both GPUs' contexts
  EXPECT_TRUE(fake::State().allocations.empty());
}

TEST_F(UvmMultiGpuTest, EachGpuMakesRoomWithinItsOwnBudget) {
  Start(DeviceSizes{0, {{0, 4 * kMiB}, {1, 2 * kMiB}}});
  RegionPtr a = RegionOn(0, 1, 4 * kMiB);
  RegionPtr b = RegionOn(1, 2, 6 * kMiB);
  for (uint32_t p = 0; p < 2; ++p) ASSERT_TRUE(dev_->Promote(*a, p).ok());
  fake::State().prefetches.clear();
  ASSERT_TRUE(dev_->Promote(*b, 0).ok());
  ASSERT_TRUE(dev_->Promote(*b, 1).ok());  // GPU 1 holds one page: b's page 0 goes
  EXPECT_EQ(TierOf(b, 0), Tier::kHost);
  EXPECT_EQ(TierOf(b, 1), Tier::kDevice);
  EXPECT_EQ(TierOf(a, 0), Tier::kDevice);  // GPU 0's pages stay where they are
  EXPECT_EQ(TierOf(a, 1), Tier::kDevice);
  EXPECT_EQ(UsedOn(0), 4 * kMiB);
  EXPECT_EQ(UsedOn(1), 2 * kMiB);
  EXPECT_EQ(dev_->resident_bytes(), 6 * kMiB);
  // b's moves went to GPU 1 on GPU 1's stream, the eviction to the host.
  for (const fake::Prefetch& p : fake::State().prefetches) {
    EXPECT_TRUE(p.device == 1 || p.device == -1) << p.device;
    EXPECT_EQ(p.stream, reinterpret_cast<CUstream>(uintptr_t{0x501}));
  }
  EXPECT_EQ(Counters::Get(counters_.driver_evictions), 1u);
}

TEST_F(UvmMultiGpuTest, PagesFaultedInBeyondAGpusBudgetGoBackFromThatGpuOnly) {
  Start(DeviceSizes{0, {{0, 4 * kMiB}, {1, 2 * kMiB}}});
  RegionPtr a = RegionOn(0, 1, 4 * kMiB);
  RegionPtr b = RegionOn(1, 2, 6 * kMiB);
  std::vector<UvmEvent> faults;
  for (const RegionPtr& r : {a, b}) {
    for (uint32_t p = 0; p < r->pages.size(); ++p) {
      UvmEvent e;
      e.kind = UvmEvent::Kind::kGpuFault;
      e.address = r->PageAddr(p);
      faults.push_back(e);
    }
  }
  dev_->OnUvmEvents(faults.data(), faults.size());
  EXPECT_EQ(UsedOn(0), 4 * kMiB);
  EXPECT_EQ(UsedOn(1), 6 * kMiB);  // the driver put them there
  dev_->Maintain();
  EXPECT_EQ(UsedOn(0), 4 * kMiB);
  EXPECT_EQ(UsedOn(1), 2 * kMiB);
  EXPECT_EQ(TierOf(b, 0), Tier::kHost);
  EXPECT_EQ(TierOf(b, 1), Tier::kHost);
  EXPECT_EQ(TierOf(b, 2), Tier::kDevice);
  EXPECT_EQ(TierOf(a, 0), Tier::kDevice);
}

TEST_F(UvmMultiGpuTest, AGpuTheListLeavesOutGetsNineTenthsOfItsFreeMemory) {
  fake::State().free_bytes[1] = 10 * kGiB;
  Start(DeviceSizes{0, {{0, 4 * kMiB}}});
  RegionOn(1, 1, kPage);
  const std::vector<Device::GpuUsage> gpus = dev_->gpus();
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[1].budget, 9 * kGiB);
  // And a budget above what a GPU has free is capped at it.
  dev_.reset();
  fake::Reset(2, 64 * kGiB);
  fake::State().free_bytes[1] = 3 * kGiB;
  Start(DeviceSizes{8 * kGiB, {}});
  RegionOn(1, 1, kPage);
  EXPECT_EQ(dev_->gpus()[1].budget, 3 * kGiB);
}

TEST_F(UvmMultiGpuTest, AGpuThatCannotBeSetUpFailsOnlyItsOwnAllocations) {
  Start(DeviceSizes{4 * kMiB, {}});
  fake::State().failing = "cuStreamCreateWithPriority";
  fake::State().engine_device = 1;
  auto refused = dev_->CreateRegion(1, kPage, kPage, "kv");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("GPU 1"), std::string::npos)
      << refused.status().message();
  EXPECT_EQ(fake::State().retained, fake::State().released);  // GPU 1's context let go
  fake::State().failing.clear();
  EXPECT_NE(RegionOn(0, 2, kPage), nullptr);
  EXPECT_NE(RegionOn(1, 3, kPage), nullptr);  // set up once the driver lets it
  EXPECT_EQ(dev_->gpus().size(), 2u);
}

}  // namespace
}  // namespace kvtier::cuda
