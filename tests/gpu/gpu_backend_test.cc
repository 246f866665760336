// The CUDA backend on a real GPU (ctest label gpu; every test skips when no
// CUDA device answers). Budgeted residency with data intact across moves and
// GPU writes, CUPTI fault records arriving for pages a kernel touches, and
// the backend's prefetch bandwidth against a copy from pinned memory. GPU
// memory stays under 2 GiB: every test sets its own device budget.
// Measurements are printed as "gpu-check: ..." lines (scripts/gpu-check
// collects them).
#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <vector>

#include "gpu_driver.h"
#include "runtime/device/cuda/cuda_device.h"
#include "runtime/device/cuda/uvm_device.h"
#include "runtime/storage/spill_store.h"

namespace kvtier::gpu_test {
namespace {

constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kPage = 2 * kMiB;

struct Events : DeviceEvents {
  std::mutex mu;
  std::vector<uint32_t> fault_pages;
  size_t evictions = 0;
  void OnFault(Region&, uint32_t page, Tier, uint64_t) override {
    std::lock_guard<std::mutex> l(mu);
    fault_pages.push_back(page);
  }
  void OnDriverEviction(Region&, uint32_t) override {
    std::lock_guard<std::mutex> l(mu);
    ++evictions;
  }
  size_t Faults() {
    std::lock_guard<std::mutex> l(mu);
    return fault_pages.size();
  }
};

class GpuBackend : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    gpu_ = GpuDriver::Get(&why);
    if (gpu_ == nullptr) GTEST_SKIP() << why;
    gpu_->cuCtxSetCurrent(gpu_->context);
  }
  // The backend through its real entry point, with `budget` bytes.
  std::unique_ptr<cuda::UvmDevice> MakeDevice(uint64_t budget) {
    Options options;
    options.device_budget = DeviceSizes{budget, {}};
    options.page_size = kPage;
    options.tick_ms = 10;
    auto made = MakeCudaDevice(options, &events_, &counters_);
    EXPECT_TRUE(made.ok()) << made.status().message();
    if (!made.ok()) return nullptr;
    return std::unique_ptr<cuda::UvmDevice>(
        dynamic_cast<cuda::UvmDevice*>(std::move(made).value().release()));
  }
  static double Seconds(std::chrono::steady_clock::time_point since) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
  }

  GpuDriver* gpu_ = nullptr;
  Events events_;
  Counters counters_;
};

TEST_F(GpuBackend, ResidencyStaysWithinTheBudgetAndDataSurvivesMoves) {
  auto dev = MakeDevice(256 * kMiB);
  ASSERT_NE(dev, nullptr);
  EXPECT_EQ(dev->capacity_bytes(), 256 * kMiB);
  auto made = dev->CreateRegion(1, 1024 * kMiB, kPage, "gpu test");
  ASSERT_TRUE(made.ok()) << made.status().message();
  RegionPtr r = made.value();
  auto* bytes = reinterpret_cast<unsigned char*>(r->base);
  const uint32_t pages = static_cast<uint32_t>(r->pages.size());
  for (uint32_t p = 0; p < pages; ++p) bytes[size_t{p} * kPage] = static_cast<unsigned char>(p);

  for (uint32_t p = 0; p < pages; ++p) {
    ASSERT_TRUE(dev->Promote(*r, p).ok()) << "page " << p;
    ASSERT_LE(dev->resident_bytes(), dev->capacity_bytes()) << "after promoting page " << p;
  }
  // The driver agrees with the backend's books.
  EXPECT_EQ(gpu_->LastPrefetchLocation(r->PageAddr(pages - 1), kPage), gpu_->device);
  EXPECT_EQ(gpu_->LastPrefetchLocation(r->PageAddr(0), kPage), CU_DEVICE_CPU);
  EXPECT_GE(Counters::Get(counters_.driver_evictions), pages - 128u);

  // The GPU writes every page (faulting the host ones back), then the
  // backend sends what is above the budget back to the host.
  ASSERT_EQ(gpu_->Touch(r->base + 100, kPage, pages, 0xab), CUDA_SUCCESS);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  do {
    dev->Maintain();
  } while (dev->resident_bytes() > dev->capacity_bytes() &&
           std::chrono::steady_clock::now() < deadline);
  EXPECT_LE(dev->resident_bytes(), dev->capacity_bytes());
  for (uint32_t p = 0; p < pages; ++p) {
    ASSERT_EQ(bytes[size_t{p} * kPage], static_cast<unsigned char>(p)) << "page " << p;
    ASSERT_EQ(bytes[size_t{p} * kPage + 100], 0xab) << "page " << p;
  }
  printf(
      "gpu-check: residency: %u pages of 2 MiB through a 256 MiB budget, peak %llu MiB, "
      "%llu evictions, data intact\n",
      pages, static_cast<unsigned long long>(Counters::Get(counters_.device_peak_bytes) >> 20),
      static_cast<unsigned long long>(Counters::Get(counters_.driver_evictions)));
  dev->DestroyRegion(*r);
}

TEST_F(GpuBackend, CuptiFaultRecordsArriveForPagesAKernelTouches) {
  auto dev = MakeDevice(512 * kMiB);
  ASSERT_NE(dev, nullptr);
  RegionPtr r = dev->CreateRegion(1, 64 * kMiB, kPage, "gpu test").value();
  if (!dev->observing_faults()) GTEST_SKIP() << "CUPTI unified-memory counters unavailable here";
  auto* bytes = reinterpret_cast<unsigned char*>(r->base);
  for (uint32_t p = 0; p < r->pages.size(); ++p) bytes[size_t{p} * kPage] = 1;  // on the host
  ASSERT_EQ(gpu_->Touch(r->base, kPage, 32, 7), CUDA_SUCCESS);
  const auto start = std::chrono::steady_clock::now();
  while (events_.Faults() < 32 && Seconds(start) < 5) {
    dev->Maintain();  // flushes CUPTI's buffers
    poll(nullptr, 0, 10);
  }
  const double waited = Seconds(start);
  EXPECT_EQ(events_.Faults(), 32u) << "fault records for the 32 touched pages";
  uint32_t resident = 0;
  for (uint32_t p = 0; p < 32; ++p) resident += r->pages[p].tier.load() == Tier::kDevice ? 1 : 0;
  EXPECT_EQ(resident, 32u);
  printf(
      "gpu-check: CUPTI: %zu of 32 touched pages reported as GPU faults within %.0f ms "
      "(%llu fault records' wait %.1f us mean)\n",
      events_.Faults(), waited * 1000,
      static_cast<unsigned long long>(Counters::Get(counters_.faults)),
      Counters::Get(counters_.faults)
          ? double(Counters::Get(counters_.fault_ns)) / Counters::Get(counters_.faults) / 1000
          : 0.0);
  dev->DestroyRegion(*r);
}

TEST_F(GpuBackend, PrefetchBandwidthAgainstAPinnedCopy) {
  constexpr size_t kBytes = 512 * kMiB;
  auto dev = MakeDevice(1024 * kMiB);
  ASSERT_NE(dev, nullptr);
  RegionPtr r = dev->CreateRegion(1, kBytes, kPage, "gpu test").value();
  memset(reinterpret_cast<void*>(r->base), 0x5a, kBytes);  // every page on the host
  const uint32_t pages = static_cast<uint32_t>(r->pages.size());
  auto start = std::chrono::steady_clock::now();
  for (uint32_t p = 0; p < pages; ++p) ASSERT_TRUE(dev->Promote(*r, p).ok());
  const double per_page = kBytes / Seconds(start) / 1e9;
  for (uint32_t p = 0; p < pages; ++p) ASSERT_TRUE(dev->Demote(*r, p).ok());

  void* pinned = nullptr;
  CUdeviceptr plain = 0;
  CUstream stream = nullptr;
  CUevent a = nullptr, b = nullptr;
  ASSERT_EQ(gpu_->cuMemHostAlloc(&pinned, kBytes, 0), CUDA_SUCCESS);
  ASSERT_EQ(gpu_->cuMemAlloc(&plain, kBytes), CUDA_SUCCESS);
  ASSERT_EQ(gpu_->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(gpu_->cuEventCreate(&a, 0), CUDA_SUCCESS);
  ASSERT_EQ(gpu_->cuEventCreate(&b, 0), CUDA_SUCCESS);
  memset(pinned, 0x5a, kBytes);
  float ms = 0;
  gpu_->cuMemcpyHtoDAsync(plain, pinned, kBytes, stream);  // warm-up
  gpu_->cuEventRecord(a, stream);
  gpu_->cuMemcpyHtoDAsync(plain, pinned, kBytes, stream);
  gpu_->cuEventRecord(b, stream);
  ASSERT_EQ(gpu_->cuEventSynchronize(b), CUDA_SUCCESS);
  gpu_->cuEventElapsedTime(&ms, a, b);
  const double pinned_copy = kBytes / (ms / 1e3) / 1e9;

  // One prefetch of the whole range, for the cost of the backend's per-page
  // waits.
  start = std::chrono::steady_clock::now();
  ASSERT_EQ(gpu_->api.Prefetch(r->base, kBytes, false, gpu_->device, stream), CUDA_SUCCESS);
  ASSERT_EQ(gpu_->api.cuStreamSynchronize(stream), CUDA_SUCCESS);
  const double whole = kBytes / Seconds(start) / 1e9;
  printf(
      "gpu-check: bandwidth host->device: backend promote %.1f GB/s (2 MiB pages, each "
      "waited for), one prefetch of 512 MiB %.1f GB/s, cudaMemcpyAsync from pinned memory "
      "%.1f GB/s\n",
      per_page, whole, pinned_copy);
  EXPECT_GT(per_page, 1.0) << "GB/s";
  EXPECT_GT(pinned_copy, 1.0) << "GB/s";
  gpu_->cuMemFreeHost(pinned);
  gpu_->api.cuMemFree(plain);
  dev->DestroyRegion(*r);
}

// The CUDA disk tier on the GPU: an idle process is sealed, its region is
// spilled (the GPU memory discarded), and a kernel launched through the
// driver API, which CUPTI's callback reports to the gate before it runs,
// reads every page back: the sums the GPU computes are the CPU's sums of
// what was written.
TEST_F(GpuBackend, DiskTierBringsEveryByteBackBeforeAKernelRuns) {
  char dir[] = "/var/tmp/kvtier-gpu-check.XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  SpillStoreConfig sc;
  sc.dir = dir;
  sc.budget_bytes = 256 * kMiB;
  sc.page_size = kPage;
  auto store = SpillStore::Create(sc, nullptr, &counters_);
  ASSERT_TRUE(store.ok()) << store.status().message();
  Options options;
  options.device_budget = DeviceSizes{256 * kMiB, {}};
  options.page_size = kPage;
  options.tick_ms = 10;
  options.idle_ms = 1;
  SpillStore* spill_store = store.value().get();
  auto made = MakeCudaDevice(options, &events_, &counters_, [&] { return spill_store; });
  ASSERT_TRUE(made.ok()) << made.status().message();
  std::unique_ptr<cuda::UvmDevice> dev(dynamic_cast<cuda::UvmDevice*>(made.value().release()));
  if (!dev->has_disk_tier()) GTEST_SKIP() << "the driver has no cuMemDiscardBatchAsync (CUDA 13)";
  if (!dev->gating()) GTEST_SKIP() << "CUPTI callbacks unavailable here (a profiler attached?)";
  constexpr uint32_t kPages = 32;
  RegionPtr r = dev->CreateRegion(1, kPages * kPage, kPage, "gpu disk tier").value();
  std::vector<uint64_t> expected(kPages, 0);
  for (uint32_t p = 0; p < kPages; ++p) {
    auto* words = reinterpret_cast<uint32_t*>(r->PageAddr(p));
    for (size_t w = 0; w < kPage / 4; ++w) {
      words[w] = static_cast<uint32_t>(w * 2654435761u + p);
      expected[p] += words[w];
    }
    ASSERT_TRUE(dev->Promote(*r, p).ok());
    ASSERT_TRUE(dev->Demote(*r, p).ok());
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!dev->sealed() && std::chrono::steady_clock::now() < deadline) dev->CheckIdle();
  ASSERT_TRUE(dev->sealed()) << "no GPU work was submitted, yet the process did not seal";
  std::vector<PageRef> refs;
  for (uint32_t p = 0; p < kPages; ++p) refs.push_back({r.get(), p});
  std::vector<Status> results(kPages);
  auto start = std::chrono::steady_clock::now();
  dev->SpillPages(refs, results);
  const double spill_s = Seconds(start);
  for (uint32_t p = 0; p < kPages; ++p) {
    ASSERT_TRUE(results[p].ok()) << results[p].message();
    ASSERT_EQ(r->pages[p].tier.load(), Tier::kDisk) << p;
  }
  CUdeviceptr out = 0;
  ASSERT_EQ(gpu_->api.cuMemAllocManaged(&out, kPages * sizeof(uint64_t), CU_MEM_ATTACH_GLOBAL),
            CUDA_SUCCESS);
  auto* sums = reinterpret_cast<uint64_t*>(out);
  for (uint32_t p = 0; p < kPages; ++p) sums[p] = 0;
  start = std::chrono::steady_clock::now();
  ASSERT_EQ(gpu_->PageSums(r->base, kPage, kPages, sums), CUDA_SUCCESS);
  const double launch_s = Seconds(start);
  EXPECT_EQ(Counters::Get(counters_.gate_stalls), 1u) << "the launch did not wait at the gate";
  for (uint32_t p = 0; p < kPages; ++p) EXPECT_EQ(sums[p], expected[p]) << "page " << p;
  printf(
      "gpu-check: CUDA disk tier on the GPU: %u MiB sealed and spilled in %.1f ms (%.2f GB/s); "
      "the next kernel waited %.1f ms for every page to come back (%.2f GB/s, gate stall %.1f "
      "ms); every page's sum as written: %s\n",
      kPages * 2, spill_s * 1e3, kPages * kPage / spill_s / 1e9, launch_s * 1e3,
      kPages * kPage / launch_s / 1e9, Counters::Get(counters_.gate_stall_ns) / 1e6,
      ::testing::Test::HasFailure() ? "NO" : "yes");
  gpu_->api.cuMemFree(out);
  dev->DestroyRegion(*r);
  dev.reset();
  rmdir(dir);
}

}  // namespace
}  // namespace kvtier::gpu_test
