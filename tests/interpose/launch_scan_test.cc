// LaunchScan (interpose/launch_scan.h) on the simulated GPU's regions and the
// fake driver's parameter layouts (fake_driver/fake_libcuda.c: kernel 0x1000
// takes a pointer, an int and a {pointer, count} struct). A launch whose
// arguments point into regions pushes one kLaunch signal per region; pointers
// elsewhere push none; a region reported a moment ago by the same thread is
// not reported again; both argument forms (kernelParams, and the `extra`
// parameter buffer) are read.
#include "interpose/launch_scan.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>

#include "runtime/runtime.h"
#include "start/process.h"

// The fake driver's (called so that the test links it: kvtier finds
// cuFuncGetParamInfo in the driver the process has loaded).
extern "C" int fake_driver_calls(const char* name);

namespace kvtier::interpose {
namespace {

constexpr size_t kMiB = size_t{1} << 20;
CUfunction const kFakeKernel = reinterpret_cast<CUfunction>(0x1000);

struct PointerAndCount {
  void* ptr;
  uint64_t count;
};

class LaunchScan : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("KVTIER_BACKEND", "sim", 1);
    setenv("KVTIER_STATS", "0", 1);
    setenv("KVTIER_HOST_BUDGET", "256M", 1);
    setenv("KVTIER_DEVICE_BUDGET", "64M", 1);
    ASSERT_EQ(fake_driver_calls("cuInit"), 0);
    rt_ = ProcessRuntime();
    ASSERT_NE(rt_, nullptr);
  }
  void* MakeRegion() {
    Result<void*> r = rt_->CreateRegion(8 * kMiB, nullptr);
    EXPECT_TRUE(r.ok()) << r.status().message();
    NoteRegionRange(r.value(), 8 * kMiB);
    return r.value();
  }
  uint64_t Signals() { return Counters::Get(rt_->counters().signals); }
  // A launch of the fake kernel with kernelParams.
  void Launch(void* p0, void* in_struct) {
    int n = 3;
    PointerAndCount s{in_struct, 1};
    void* params[] = {&p0, &n, &s};
    ScanDriverLaunch(kFakeKernel, params, nullptr);
  }
  Runtime* rt_ = nullptr;
};

TEST_F(LaunchScan, PointersIntoRegionsAreSignalsOncePerRegion) {
  int local = 0;
  Launch(&local, nullptr);  // no region yet: nothing to look at
  EXPECT_EQ(Signals(), 0u);
  char* a = static_cast<char*>(MakeRegion());
  char* b = static_cast<char*>(MakeRegion());
  Launch(a + 100, nullptr);
  EXPECT_EQ(Signals(), 1u);
  Launch(a + 200, nullptr);  // the same region a moment later: not again
  EXPECT_EQ(Signals(), 1u);
  Launch(&local, b + 8 * kMiB - 1);  // inside the struct argument
  EXPECT_EQ(Signals(), 2u);
  Launch(b + 8 * kMiB + 64, nullptr);  // just past the region: not in it
  EXPECT_EQ(Signals(), 2u);
  ScanDriverLaunch(reinterpret_cast<CUfunction>(0x2000), nullptr, nullptr);  // unknown kernel
  EXPECT_EQ(Signals(), 2u);
}

TEST_F(LaunchScan, TheExtraParameterBufferIsReadToo) {
  char* a = static_cast<char*>(MakeRegion());
  alignas(8) unsigned char buffer[32] = {};
  void* p = a + 4096;
  memcpy(buffer + 16, &p, sizeof p);  // the struct's pointer
  size_t size = sizeof buffer;
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buffer, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                   CU_LAUNCH_PARAM_END};
  ScanDriverLaunch(kFakeKernel, nullptr, extra);
  EXPECT_EQ(Signals(), 1u);
  size = 16;  // a buffer too short for the struct: nothing read past it
  ScanDriverLaunch(kFakeKernel, nullptr, extra);
  EXPECT_EQ(Signals(), 1u);
}

}  // namespace
}  // namespace kvtier::interpose
