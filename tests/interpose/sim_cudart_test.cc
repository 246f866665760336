// SimCudaRuntime, PlainAllocations and the simulated error table on their own (no
// preload, no runtime).
#include "interpose/sim_cudart.h"

#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <vector>

#include "interpose/cudart_errors.h"
#include "interpose/plain_allocations.h"

namespace kvtier::interpose {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

TEST(InterposePlainAllocations, ContainsOnlyWholeRangesInsideOneAllocation) {
  PlainAllocations t;
  alignas(256) static char a[1024], b[1024];
  ASSERT_TRUE(t.Reserve(1024, 4096));
  t.Insert(a, 1024);
  ASSERT_TRUE(t.Reserve(512, 4096));
  t.Insert(b, 512);
  EXPECT_EQ(t.bytes(), 1536u);
  EXPECT_TRUE(t.Contains(a, 1024));
  EXPECT_TRUE(t.Contains(a + 1000, 24));
  EXPECT_FALSE(t.Contains(a + 1000, 25));
  EXPECT_FALSE(t.Contains(b + 512, 1));
  EXPECT_TRUE(t.Contains(b + 511, 0));
  EXPECT_EQ(t.Remove(a + 1), 0u);  // interior pointer
  EXPECT_EQ(t.Remove(a), 1024u);
  EXPECT_EQ(t.Remove(a), 0u);  // twice
  EXPECT_EQ(t.bytes(), 512u);
  EXPECT_EQ(t.count(), 1u);
}

TEST(InterposePlainAllocations, ReserveNeverExceedsTheLimitUnderContention) {
  PlainAllocations t;
  constexpr uint64_t kLimit = 1000;
  std::vector<std::thread> threads;
  std::atomic<int> granted{0};
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&] {
      for (int j = 0; j < 100; ++j) granted += t.Reserve(3, kLimit);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(granted.load(), static_cast<int>(kLimit / 3));
  EXPECT_EQ(t.bytes(), kLimit / 3 * 3);
  EXPECT_FALSE(t.Reserve(UINT64_MAX, UINT64_MAX));
}

TEST(InterposeSimCudaRuntime, AllocationsAreAlignedAndFitTheDevice) {
  SimCudaRuntime gpu("sim test", 8 * kMiB);
  void *p = nullptr, *q = nullptr, *r = nullptr;
  ASSERT_EQ(gpu.Alloc(3 * kMiB + 5, 0, &p), cudaSuccess);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u);
  memset(p, 1, 3 * kMiB + 5);  // host-addressable (ASan checks the bounds)
  EXPECT_EQ(gpu.Alloc(5 * kMiB, 0, &q), cudaErrorMemoryAllocation);         // 3 + 5 > 8
  EXPECT_EQ(gpu.Alloc(4 * kMiB, 2 * kMiB, &q), cudaErrorMemoryAllocation);  // regions hold 2
  ASSERT_EQ(gpu.Alloc(4 * kMiB, 0, &q), cudaSuccess);
  EXPECT_EQ(gpu.memory().bytes(), 7 * kMiB + 5);
  EXPECT_EQ(gpu.Free(p), 3 * kMiB + 5);
  EXPECT_EQ(gpu.Free(p), 0u);
  ASSERT_EQ(gpu.Alloc(4 * kMiB, 0, &r), cudaSuccess);
  EXPECT_EQ(gpu.Free(q), 4 * kMiB);
  EXPECT_EQ(gpu.Free(r), 4 * kMiB);
  EXPECT_EQ(gpu.memory().bytes(), 0u);
}

TEST(InterposeSimCudaRuntime, StreamsAreDistinctUntilDestroyed) {
  SimCudaRuntime gpu("sim test", kMiB);
  cudaStream_t a = nullptr, b = nullptr;
  ASSERT_EQ(gpu.CreateStream(0, 0, &a), cudaSuccess);
  ASSERT_EQ(gpu.CreateStream(cudaStreamNonBlocking, -2, &b), cudaSuccess);
  EXPECT_NE(a, b);
  EXPECT_NE(a, nullptr);
  EXPECT_TRUE(gpu.ValidStream(a));
  EXPECT_TRUE(gpu.ValidStream(nullptr));
  EXPECT_TRUE(gpu.ValidStream(cudaStreamLegacy));
  EXPECT_TRUE(gpu.ValidStream(cudaStreamPerThread));
  EXPECT_EQ(gpu.CreateStream(0x4, 0, &a), cudaErrorInvalidValue);
  EXPECT_EQ(gpu.DestroyStream(a), cudaSuccess);
  EXPECT_FALSE(gpu.ValidStream(a));
  EXPECT_EQ(gpu.DestroyStream(a), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(gpu.DestroyStream(nullptr), cudaErrorInvalidResourceHandle);
}

TEST(InterposeSimCudaRuntime, EventsTimeWhatWasRecorded) {
  SimCudaRuntime gpu("sim test", kMiB);
  cudaEvent_t a, b, untimed;
  ASSERT_EQ(gpu.CreateEvent(cudaEventDefault, &a), cudaSuccess);
  ASSERT_EQ(gpu.CreateEvent(cudaEventBlockingSync, &b), cudaSuccess);
  ASSERT_EQ(gpu.CreateEvent(cudaEventDisableTiming, &untimed), cudaSuccess);
  EXPECT_EQ(gpu.CreateEvent(cudaEventInterprocess, &untimed), cudaErrorInvalidValue);
  float ms = 0;
  EXPECT_EQ(gpu.ElapsedTime(&ms, a, b), cudaErrorInvalidResourceHandle);
  ASSERT_EQ(gpu.RecordEvent(a, nullptr, 1'000'000), cudaSuccess);
  ASSERT_EQ(gpu.RecordEvent(b, nullptr, 3'500'000), cudaSuccess);
  ASSERT_EQ(gpu.ElapsedTime(&ms, a, b), cudaSuccess);
  EXPECT_FLOAT_EQ(ms, 2.5f);
  ASSERT_EQ(gpu.RecordEvent(untimed, nullptr, 4'000'000), cudaSuccess);
  EXPECT_EQ(gpu.ElapsedTime(&ms, a, untimed), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(gpu.ElapsedTime(nullptr, a, b), cudaErrorInvalidValue);
  EXPECT_EQ(gpu.RecordEvent(a, reinterpret_cast<cudaStream_t>(0x1234), 0),
            cudaErrorInvalidResourceHandle);
  EXPECT_EQ(gpu.DestroyEvent(a), cudaSuccess);
  EXPECT_EQ(gpu.CheckEvent(a), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(gpu.CheckEvent(b), cudaSuccess);
}

TEST(InterposeSimCudaRuntime, PropertiesAndAttributesAgree) {
  SimCudaRuntime gpu("kvtier simulated GPU", 80 * (uint64_t{1} << 30));
  cudaDeviceProp p;
  gpu.Properties(&p);
  EXPECT_STREQ(p.name, "kvtier simulated GPU");
  EXPECT_EQ(p.totalGlobalMem, 80 * (uint64_t{1} << 30));
  int v = 0;
  ASSERT_EQ(gpu.Attribute(cudaDevAttrMultiProcessorCount, &v), cudaSuccess);
  EXPECT_EQ(v, p.multiProcessorCount);
  ASSERT_EQ(gpu.Attribute(cudaDevAttrConcurrentManagedAccess, &v), cudaSuccess);
  EXPECT_EQ(v, 1);
  EXPECT_EQ(gpu.Attribute(cudaDevAttrMax, &v), cudaErrorInvalidValue);
  EXPECT_EQ(gpu.Attribute(cudaDevAttrWarpSize, nullptr), cudaErrorInvalidValue);
  SimCudaRuntime long_name(std::string(400, 'x'), 1);
  long_name.Properties(&p);
  EXPECT_EQ(strlen(p.name), sizeof p.name - 1);
}

TEST(InterposeSimErrors, TextsAndStickyLastError) {
  EXPECT_STREQ(SimErrorName(cudaErrorInvalidResourceHandle), "cudaErrorInvalidResourceHandle");
  EXPECT_STREQ(SimErrorString(cudaErrorInvalidDevice), "invalid device ordinal");
  EXPECT_EQ(SimErrorName(cudaErrorLaunchFailure), nullptr);
  EXPECT_EQ(TakeLastError(), cudaSuccess);
  EXPECT_EQ(SimResult(cudaErrorInvalidValue), cudaErrorInvalidValue);
  EXPECT_EQ(SimResult(cudaErrorNotReady), cudaErrorNotReady);  // not an error
  EXPECT_EQ(SimResult(cudaSuccess), cudaSuccess);
  EXPECT_EQ(PeekLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(TakeLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(TakeLastError(), cudaSuccess);
}

}  // namespace
}  // namespace kvtier::interpose
