// The simulated CUDA runtime as a program linked against the real libcudart
// sees it: run under LD_PRELOAD=libkvtier.so with KVTIER_BACKEND=sim (ctest
// preload_sim_api sets that up). Device queries, plain allocations and their
// accounting, copies, fills, streams, events, errors, tiered regions and
// their hints, and fork.
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "kvtier/kvtier.h"

namespace {

constexpr size_t kMiB = size_t{1} << 20;

// The kvtier C API, found in the preloaded library.
int Hint(const void* p, size_t n, int kind) {
  using Fn = int (*)(const void*, size_t, int);
  static Fn fn = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, "kvtier_hint"));
  return fn ? fn(p, n, kind) : -ENOSYS;
}

int Wait(const void* p, size_t n) {
  using Fn = int (*)(const void*, size_t);
  static Fn fn = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, "kvtier_wait"));
  return fn ? fn(p, n) : -ENOSYS;
}

class SimApi : public ::testing::Test {
 protected:
  void SetUp() override {
    cudaDeviceProp prop;
    ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess)
        << "run this under LD_PRELOAD=libkvtier.so KVTIER_BACKEND=sim (ctest preload_sim_api)";
    ASSERT_NE(strstr(prop.name, "simulated"), nullptr) << prop.name;
    cudaGetLastError();
  }
};

TEST_F(SimApi, DeviceQueries) {
  int count = 0, dev = -1, warp = 0, major = 0;
  EXPECT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  EXPECT_EQ(count, 1);
  EXPECT_EQ(cudaSetDevice(0), cudaSuccess);
  EXPECT_EQ(cudaGetDevice(&dev), cudaSuccess);
  EXPECT_EQ(dev, 0);
  cudaDeviceProp prop;
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  EXPECT_STREQ(prop.name, getenv("KVTIER_SIM_DEVICE_NAME"));
  EXPECT_EQ(prop.totalGlobalMem, size_t{1} << 30);  // KVTIER_SIM_DEVICE_MEMORY=1G
  EXPECT_EQ(prop.managedMemory, 1);
  EXPECT_EQ(cudaDeviceGetAttribute(&warp, cudaDevAttrWarpSize, 0), cudaSuccess);
  EXPECT_EQ(warp, 32);
  EXPECT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), cudaSuccess);
  EXPECT_EQ(major, prop.major);
  EXPECT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrMax, 0), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetDeviceProperties(&prop, 1), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaSetDevice(1), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  int version = 0;
  EXPECT_EQ(cudaDriverGetVersion(&version), cudaSuccess);
  EXPECT_EQ(version, CUDART_VERSION);
}

TEST_F(SimApi, LastErrorIsStickyPerThreadUntilRead) {
  EXPECT_EQ(cudaSetDevice(7), cudaErrorInvalidDevice);
  std::thread other([] { EXPECT_EQ(cudaGetLastError(), cudaSuccess); });
  other.join();
  EXPECT_EQ(cudaPeekAtLastError(), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST_F(SimApi, ErrorTexts) {
  EXPECT_STREQ(cudaGetErrorName(cudaErrorInvalidValue), "cudaErrorInvalidValue");
  EXPECT_STREQ(cudaGetErrorString(cudaErrorMemoryAllocation), "out of memory");
  // A code the simulator never returns: libcudart's own text.
  EXPECT_STREQ(cudaGetErrorName(cudaErrorNoDevice), "cudaErrorNoDevice");
}

TEST_F(SimApi, PlainAllocationsAreAlignedAndCounted) {
  size_t free0 = 0, total = 0, free1 = 0;
  ASSERT_EQ(cudaMemGetInfo(&free0, &total), cudaSuccess);
  EXPECT_EQ(total, size_t{1} << 30);
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 3 * kMiB + 1), cudaSuccess);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u);
  ASSERT_EQ(cudaMemGetInfo(&free1, &total), cudaSuccess);
  EXPECT_EQ(free0 - free1, 3 * kMiB + 1);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  ASSERT_EQ(cudaMemGetInfo(&free1, &total), cudaSuccess);
  EXPECT_EQ(free1, free0);
}

TEST_F(SimApi, BadFreesAndEdgeSizes) {
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, kMiB), cudaSuccess);
  EXPECT_EQ(cudaFree(static_cast<char*>(p) + 256), cudaErrorInvalidValue);  // interior
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  EXPECT_EQ(cudaFree(p), cudaErrorInvalidValue);  // twice
  int local = 0;
  EXPECT_EQ(cudaFree(&local), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFree(nullptr), cudaSuccess);
  void* z = &local;
  EXPECT_EQ(cudaMalloc(&z, 0), cudaSuccess);
  EXPECT_EQ(z, nullptr);
  EXPECT_EQ(cudaMalloc(nullptr, kMiB), cudaErrorInvalidValue);
  void* huge = nullptr;
  EXPECT_EQ(cudaMalloc(&huge, size_t{2} << 30), cudaErrorMemoryAllocation);  // more than the device
  cudaGetLastError();
}

TEST_F(SimApi, CopiesAndFillsCheckTheDeviceSide) {
  std::vector<unsigned char> host(kMiB), back(kMiB);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<unsigned char>(i * 7);
  void *a = nullptr, *b = nullptr;
  ASSERT_EQ(cudaMalloc(&a, kMiB), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&b, kMiB), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(a, host.data(), kMiB, cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(b, a, kMiB, cudaMemcpyDeviceToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(back.data(), b, kMiB, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(back, host);
  EXPECT_EQ(cudaMemset(b, 0xab, kMiB / 2), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(back.data(), b, kMiB, cudaMemcpyDefault), cudaSuccess);
  EXPECT_EQ(back[0], 0xab);
  EXPECT_EQ(back[kMiB / 2], host[kMiB / 2]);
  // Wrong side, overrun, bad direction: libcudart's codes, nothing copied.
  EXPECT_EQ(cudaMemcpy(back.data(), host.data(), 16, cudaMemcpyHostToDevice),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(back.data(), a, kMiB + 1, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
  // 7: inside the enum's value range (a well-defined cast) but no direction.
  EXPECT_EQ(cudaMemcpy(a, b, 16, static_cast<cudaMemcpyKind>(7)), cudaErrorInvalidMemcpyDirection);
  EXPECT_EQ(cudaMemset(host.data(), 0, 16), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(a, b, 0, cudaMemcpyDeviceToDevice), cudaSuccess);
  cudaGetLastError();
  EXPECT_EQ(cudaFree(a), cudaSuccess);
  EXPECT_EQ(cudaFree(b), cudaSuccess);
}

TEST_F(SimApi, StreamsAndEventsAreSynchronous) {
  cudaStream_t s = nullptr, prio = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithPriority(&prio, cudaStreamNonBlocking, -1), cudaSuccess);
  EXPECT_NE(s, prio);
  void* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 4096), cudaSuccess);
  char buf[4096] = {1, 2, 3};
  EXPECT_EQ(cudaMemcpyAsync(d, buf, sizeof buf, cudaMemcpyHostToDevice, s), cudaSuccess);
  EXPECT_EQ(cudaMemsetAsync(d, 0, 16, prio), cudaSuccess);
  EXPECT_EQ(cudaStreamQuery(s), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(cudaStreamPerThread), cudaSuccess);

  cudaEvent_t start, stop, untimed;
  ASSERT_EQ(cudaEventCreate(&start), cudaSuccess);
  ASSERT_EQ(cudaEventCreateWithFlags(&stop, cudaEventBlockingSync), cudaSuccess);
  ASSERT_EQ(cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming), cudaSuccess);
  float ms = -1;
  EXPECT_EQ(cudaEventElapsedTime(&ms, start, stop),
            cudaErrorInvalidResourceHandle);  // not recorded
  EXPECT_EQ(cudaEventQuery(start), cudaSuccess);
  EXPECT_EQ(cudaEventRecord(start, s), cudaSuccess);
  EXPECT_EQ(cudaEventRecord(stop, s), cudaSuccess);
  EXPECT_EQ(cudaEventRecord(untimed, nullptr), cudaSuccess);
  EXPECT_EQ(cudaEventSynchronize(stop), cudaSuccess);
  EXPECT_EQ(cudaEventElapsedTime(&ms, start, stop), cudaSuccess);
  EXPECT_GE(ms, 0.0f);
  EXPECT_EQ(cudaEventElapsedTime(&ms, start, untimed), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaEventCreateWithFlags(&untimed, 0x80), cudaErrorInvalidValue);

  EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(s), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaMemcpyAsync(d, buf, 16, cudaMemcpyHostToDevice, s), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaEventDestroy(start), cudaSuccess);
  EXPECT_EQ(cudaEventDestroy(start), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaEventDestroy(stop), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(prio), cudaSuccess);
  EXPECT_EQ(cudaFree(d), cudaSuccess);
  cudaGetLastError();
}

void NotAKernel() {}

// The simulated GPU runs no kernels: a launch fails where the program looks
// (the return value and the sticky last error), it is never handed to the
// real libcudart.
TEST_F(SimApi, KernelLaunchesFailVisibly) {
  const void* func = reinterpret_cast<const void*>(&NotAKernel);
  EXPECT_EQ(cudaLaunchKernel(func, dim3(1), dim3(32), nullptr, 0, nullptr), cudaErrorNotSupported);
  EXPECT_EQ(cudaGetLastError(), cudaErrorNotSupported);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(1);
  config.blockDim = dim3(32);
  EXPECT_EQ(cudaLaunchKernelExC(&config, func, nullptr), cudaErrorNotSupported);
  EXPECT_EQ(cudaLaunchCooperativeKernel(func, dim3(1), dim3(32), nullptr, 0, nullptr),
            cudaErrorNotSupported);
  EXPECT_EQ(cudaPeekAtLastError(), cudaErrorNotSupported);
  cudaGetLastError();
}

// KVTIER_MATCH=size>=16M (set by the ctest): 16 MiB and up become regions.
TEST_F(SimApi, MatchedAllocationsAreTieredRegions) {
  void *region = nullptr, *plain = nullptr;
  ASSERT_EQ(cudaMalloc(&region, 32 * kMiB), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&plain, 4 * kMiB), cudaSuccess);
  EXPECT_EQ(Hint(region, kMiB, KVTIER_HINT_WILL_NEED), 0);
  EXPECT_EQ(Hint(plain, kMiB, KVTIER_HINT_WILL_NEED), -ENOENT);
  EXPECT_EQ(Hint(region, kMiB, 99), -EINVAL);

  // Region memory is host-addressable device memory with the usual API.
  std::vector<unsigned char> host(32 * kMiB), back(32 * kMiB);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<unsigned char>(i * 13 + 1);
  EXPECT_EQ(cudaMemcpy(region, host.data(), host.size(), cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(back.data(), region, back.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(back, host);
  // A parked range and its wake-up: the bytes are the same afterwards.
  EXPECT_EQ(Hint(region, 8 * kMiB, KVTIER_HINT_DORMANT), 0);
  EXPECT_EQ(Wait(region, 8 * kMiB), 0);
  EXPECT_EQ(Wait(plain, kMiB), -ENOENT);
  EXPECT_EQ(cudaMemcpy(back.data(), region, back.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(back, host);
  EXPECT_EQ(cudaMemset(region, 0, kMiB), cudaSuccess);

  cudaMemLocation device{cudaMemLocationTypeDevice, 0}, host_loc{cudaMemLocationTypeHost, 0};
  EXPECT_EQ(cudaMemPrefetchAsync(region, 8 * kMiB, host_loc, 0, nullptr), cudaSuccess);
  EXPECT_EQ(cudaMemPrefetchAsync(region, 8 * kMiB, device, 0, nullptr), cudaSuccess);
  EXPECT_EQ(cudaMemAdvise(region, 8 * kMiB, cudaMemAdviseSetPreferredLocation, device),
            cudaSuccess);
  // Plain memory is not managed memory; other devices do not exist.
  EXPECT_EQ(cudaMemPrefetchAsync(plain, kMiB, device, 0, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(
      cudaMemPrefetchAsync(region, kMiB, cudaMemLocation{cudaMemLocationTypeDevice, 1}, 0, nullptr),
      cudaErrorInvalidDevice);
  EXPECT_EQ(cudaMemPrefetchAsync(region, 64 * kMiB, device, 0, nullptr),
            cudaErrorInvalidValue);  // overrun
  EXPECT_EQ(cudaMemAdvise(region, kMiB, static_cast<cudaMemoryAdvise>(7), device),
            cudaErrorInvalidValue);
  cudaGetLastError();

  EXPECT_EQ(cudaFree(static_cast<char*>(region) + 4096), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFree(region), cudaSuccess);
  EXPECT_EQ(cudaFree(region), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFree(plain), cudaSuccess);
  cudaGetLastError();
}

// Run by ctest preload_sim_oversubscribe with KVTIER_OVERSUBSCRIBE=0.5 and
// KVTIER_HOST_BUDGET=1G, KVTIER_DISK_BUDGET=0.
TEST_F(SimApi, OversubscriptionAddsToFreeAndTotal) {
  const char* over = getenv("KVTIER_OVERSUBSCRIBE");
  if (over == nullptr || strcmp(over, "0.5") != 0) GTEST_SKIP() << "needs KVTIER_OVERSUBSCRIBE=0.5";
  size_t free_bytes = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total), cudaSuccess);
  EXPECT_EQ(total, (size_t{1} << 30) + (size_t{512} << 20));
  EXPECT_GT(free_bytes, size_t{1} << 30);
}

TEST_F(SimApi, ForkedChildHasAWorkingDevice) {
  void* parent = nullptr;
  ASSERT_EQ(cudaMalloc(&parent, kMiB), cudaSuccess);
  ASSERT_EQ(cudaMemset(parent, 7, kMiB), cudaSuccess);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // Exit codes tell the parent which step failed.
    unsigned char c = 0;
    if (cudaMemcpy(&c, parent, 1, cudaMemcpyDeviceToHost) != cudaSuccess || c != 7) _exit(10);
    void* p = nullptr;
    if (cudaMalloc(&p, kMiB) != cudaSuccess) _exit(11);
    if (cudaMemset(p, 1, kMiB) != cudaSuccess) _exit(12);
    if (cudaFree(p) != cudaSuccess) _exit(13);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(cudaFree(parent), cudaSuccess);
}

}  // namespace
