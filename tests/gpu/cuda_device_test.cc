// MakeCudaDevice's start-up on a fake driver: every driver call it makes
// fails in turn (and a budget below one page), and each failure ends in one
// line naming the cause, with every primary context it retained released.
// No GPU needed (label cuda).
#include "runtime/device/cuda/cuda_device.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "runtime/device/cuda/driver_api.h"
#include "tests/testing/fake_cuda_driver.h"

namespace kvtier {
namespace {

namespace fake = cuda::fake;

// A fresh fake driver: one GPU with 8 GiB free, in a process where no
// context is current (as before the engine's first CUDA call).
fake::Driver& FreshDriver() {
  fake::Reset(1, size_t{8} << 30);
  fake::State().engine_device = -1;
  return fake::State();
}

Options TestOptions() {
  Result<Options> o = ParseOptions([](const char* name) -> const char* {
    static const std::map<std::string, std::string> values = {{"KVTIER_STATS", "0"}};
    auto it = values.find(name);
    return it == values.end() ? nullptr : it->second.c_str();
  });
  EXPECT_TRUE(o.ok());
  return o.value();
}

TEST(CudaDeviceStart, EveryDriverCallFailsInTurnWithOneLineAndNothingRetained) {
  const cuda::DriverApi api = fake::Api();
  const Options options = TestOptions();
  Counters counters;
  // The calls a start makes, in order, from one that succeeds.
  fake::Driver* g = &FreshDriver();
  std::vector<std::string> steps;
  {
    Result<std::unique_ptr<Device>> made = MakeCudaDeviceOn(api, options, nullptr, &counters);
    ASSERT_TRUE(made.ok()) << made.status().message();
    EXPECT_EQ(made.value()->capacity_bytes(),
              g->free_bytes[0] / 10 * 9 / options.page_size * options.page_size);
    for (const std::string& c : g->calls) {
      if (steps.empty() || steps.back() != c) steps.push_back(c);
    }
  }
  EXPECT_EQ(g->retained, 1);
  EXPECT_EQ(g->released, g->retained) << "the device releases its context when destroyed";
  for (const char* step : {"cuInit", "cuDeviceGetCount", "cuDeviceGet", "cuDeviceGetAttribute",
                           "cuDevicePrimaryCtxRetain", "cuCtxPushCurrent", "cuMemGetInfo",
                           "cuStreamCreateWithPriority"}) {
    EXPECT_NE(std::find(steps.begin(), steps.end(), step), steps.end()) << step;
  }

  for (const std::string& failing : steps) {
    SCOPED_TRACE("failing: " + failing);
    g = &FreshDriver();
    g->failing = failing;
    Result<std::unique_ptr<Device>> made = MakeCudaDeviceOn(api, options, nullptr, &counters);
    ASSERT_FALSE(made.ok());
    const std::string message = made.status().message();
    EXPECT_FALSE(message.empty());
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    EXPECT_EQ(message.find("CUDA_SUCCESS"), std::string::npos) << message;
    EXPECT_EQ(g->released, g->retained) << message;
  }
}

TEST(CudaDeviceStart, TheDiskTierIsOpenedOnlyOnceAGpuAnswers) {
  const cuda::DriverApi api = fake::Api();
  const Options options = TestOptions();
  Counters counters;
  int opened = 0;
  auto open_store = [&]() -> SpillStore* {
    ++opened;
    return nullptr;  // as with KVTIER_DISK_BUDGET=0
  };
  FreshDriver().failing = "cuInit";  // no GPU: the process runs untiered, no spill file
  EXPECT_FALSE(MakeCudaDeviceOn(api, options, nullptr, &counters, open_store).ok());
  EXPECT_EQ(opened, 0);
  FreshDriver().managed = 0;  // a GPU kvtier cannot tier on: likewise
  EXPECT_FALSE(MakeCudaDeviceOn(api, options, nullptr, &counters, open_store).ok());
  EXPECT_EQ(opened, 0);
  FreshDriver();
  Result<std::unique_ptr<Device>> made =
      MakeCudaDeviceOn(api, options, nullptr, &counters, open_store);
  ASSERT_TRUE(made.ok()) << made.status().message();
  EXPECT_EQ(opened, 1);
  EXPECT_FALSE(made.value()->has_disk_tier());
}

TEST(CudaDeviceStart, AGpuWithoutManagedMemoryOrWithTooLittleFreeIsRefused) {
  const cuda::DriverApi api = fake::Api();
  const Options options = TestOptions();
  Counters counters;
  fake::Driver* g = &FreshDriver();
  g->managed = 0;
  Result<std::unique_ptr<Device>> made = MakeCudaDeviceOn(api, options, nullptr, &counters);
  ASSERT_FALSE(made.ok());
  EXPECT_NE(made.status().message().find("managed memory"), std::string::npos)
      << made.status().message();
  EXPECT_EQ(g->retained, 0);

  g = &FreshDriver();
  g->free_bytes[0] = options.page_size / 2;  // less than one page free
  made = MakeCudaDeviceOn(api, options, nullptr, &counters);
  ASSERT_FALSE(made.ok());
  EXPECT_NE(made.status().message().find("less than one page"), std::string::npos)
      << made.status().message();
  EXPECT_EQ(g->released, g->retained);
}

}  // namespace
}  // namespace kvtier
