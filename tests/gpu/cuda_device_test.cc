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

namespace kvtier {
namespace {

// The fake driver's state; the tests run one at a time in a process.
struct Fake {
  std::string failing;  // the call that fails ("" for none)
  std::vector<std::string> calls;
  int retained = 0, released = 0;
  size_t free_bytes = size_t{8} << 30;
  int managed = 1;
} g;

CUresult Call(const char* name) {
  g.calls.emplace_back(name);
  return g.failing == name ? CUDA_ERROR_UNKNOWN : CUDA_SUCCESS;
}

CUstream const kStream = reinterpret_cast<CUstream>(0x5);
CUcontext const kContext = reinterpret_cast<CUcontext>(0x7);

cuda::DriverApi FakeApi() {
  cuda::DriverApi api;
  api.cuInit = [](unsigned) { return Call("cuInit"); };
  api.cuDeviceGetCount = [](int* n) {
    *n = 1;
    return Call("cuDeviceGetCount");
  };
  api.cuCtxGetDevice = [](CUdevice*) { return CUDA_ERROR_INVALID_CONTEXT; };  // none current
  api.cuDeviceGet = [](CUdevice* d, int ordinal) {
    *d = ordinal;
    return Call("cuDeviceGet");
  };
  api.cuDeviceGetAttribute = [](int* v, CUdevice_attribute, CUdevice) {
    *v = g.managed;
    return Call("cuDeviceGetAttribute");
  };
  api.cuDevicePrimaryCtxRetain = [](CUcontext* c, CUdevice) {
    CUresult r = Call("cuDevicePrimaryCtxRetain");
    if (r == CUDA_SUCCESS) {
      *c = kContext;
      ++g.retained;
    }
    return r;
  };
  api.cuDevicePrimaryCtxRelease = [](CUdevice) {
    ++g.released;
    return CUDA_SUCCESS;
  };
  api.cuCtxPushCurrent = [](CUcontext) { return Call("cuCtxPushCurrent"); };
  api.cuCtxPopCurrent = [](CUcontext* c) {
    *c = kContext;
    return CUDA_SUCCESS;
  };
  api.cuMemGetInfo = [](size_t* free_bytes, size_t* total) {
    *free_bytes = g.free_bytes;
    *total = size_t{16} << 30;
    return Call("cuMemGetInfo");
  };
  api.cuCtxGetStreamPriorityRange = [](int* least, int* greatest) {
    *least = 0;
    *greatest = -5;
    return CUDA_SUCCESS;
  };
  api.cuStreamCreateWithPriority = [](CUstream* s, unsigned, int) {
    *s = kStream;
    return Call("cuStreamCreateWithPriority");
  };
  api.cuStreamSynchronize = [](CUstream) { return CUDA_SUCCESS; };
  api.cuStreamDestroy = [](CUstream) { return CUDA_SUCCESS; };
  api.cuGetErrorName = [](CUresult r, const char** s) {
    *s = r == CUDA_SUCCESS ? "CUDA_SUCCESS" : "CUDA_ERROR_FAKE";
    return CUDA_SUCCESS;
  };
  return api;
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
  const cuda::DriverApi api = FakeApi();
  const Options options = TestOptions();
  Counters counters;
  // The calls a start makes, in order, from one that succeeds.
  g = Fake{};
  {
    Result<std::unique_ptr<Device>> made = MakeCudaDeviceOn(api, options, nullptr, &counters);
    ASSERT_TRUE(made.ok()) << made.status().message();
    EXPECT_EQ(made.value()->capacity_bytes(),
              g.free_bytes / 10 * 9 / options.page_size * options.page_size);
  }
  EXPECT_EQ(g.retained, 1);
  EXPECT_EQ(g.released, g.retained) << "the device releases its context when destroyed";
  std::vector<std::string> steps;
  for (const std::string& c : g.calls) {
    if (steps.empty() || steps.back() != c) steps.push_back(c);
  }
  for (const char* step : {"cuInit", "cuDeviceGetCount", "cuDeviceGet", "cuDeviceGetAttribute",
                           "cuDevicePrimaryCtxRetain", "cuCtxPushCurrent", "cuMemGetInfo",
                           "cuStreamCreateWithPriority"}) {
    EXPECT_NE(std::find(steps.begin(), steps.end(), step), steps.end()) << step;
  }

  for (const std::string& failing : steps) {
    SCOPED_TRACE("failing: " + failing);
    g = Fake{};
    g.failing = failing;
    Result<std::unique_ptr<Device>> made = MakeCudaDeviceOn(api, options, nullptr, &counters);
    ASSERT_FALSE(made.ok());
    const std::string message = made.status().message();
    EXPECT_FALSE(message.empty());
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    EXPECT_EQ(message.find("CUDA_SUCCESS"), std::string::npos) << message;
    EXPECT_EQ(g.released, g.retained) << message;
  }
}

TEST(CudaDeviceStart, TheDiskTierIsOpenedOnlyOnceAGpuAnswers) {
  const cuda::DriverApi api = FakeApi();
  const Options options = TestOptions();
  Counters counters;
  int opened = 0;
  auto open_store = [&]() -> SpillStore* {
    ++opened;
    return nullptr;  // as with KVTIER_DISK_BUDGET=0
  };
  g = Fake{};
  g.failing = "cuInit";  // no GPU: the process runs untiered, no spill file
  EXPECT_FALSE(MakeCudaDeviceOn(api, options, nullptr, &counters, open_store).ok());
  EXPECT_EQ(opened, 0);
  g = Fake{};
  g.managed = 0;  // a GPU kvtier cannot tier on: likewise
  EXPECT_FALSE(MakeCudaDeviceOn(api, options, nullptr, &counters, open_store).ok());
  EXPECT_EQ(opened, 0);
  g = Fake{};
  Result<std::unique_ptr<Device>> made =
      MakeCudaDeviceOn(api, options, nullptr, &counters, open_store);
  ASSERT_TRUE(made.ok()) << made.status().message();
  EXPECT_EQ(opened, 1);
  EXPECT_FALSE(made.value()->has_disk_tier());
}

TEST(CudaDeviceStart, AGpuWithoutManagedMemoryOrWithTooLittleFreeIsRefused) {
  const cuda::DriverApi api = FakeApi();
  const Options options = TestOptions();
  Counters counters;
  g = Fake{};
  g.managed = 0;
  Result<std::unique_ptr<Device>> made = MakeCudaDeviceOn(api, options, nullptr, &counters);
  ASSERT_FALSE(made.ok());
  EXPECT_NE(made.status().message().find("managed memory"), std::string::npos)
      << made.status().message();
  EXPECT_EQ(g.retained, 0);

  g = Fake{};
  g.free_bytes = options.page_size / 2;  // less than one page free
  made = MakeCudaDeviceOn(api, options, nullptr, &counters);
  ASSERT_FALSE(made.ok());
  EXPECT_NE(made.status().message().find("less than one page"), std::string::npos)
      << made.status().message();
  EXPECT_EQ(g.released, g.retained);
}

}  // namespace
}  // namespace kvtier
