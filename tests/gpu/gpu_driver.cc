// GpuDriver: see gpu_driver.h.
#include "gpu_driver.h"

#include "runtime/device/cuda/real_dl.h"
#include "tools/bench/gpu_kernels.h"

namespace kvtier::gpu_test {
namespace {

template <typename Fn>
bool Resolve(void* lib, const char* name, Fn* out) {
  *out = reinterpret_cast<Fn>(cuda::RealDlsym(lib, name));
  return *out != nullptr;
}

}  // namespace

GpuDriver* GpuDriver::Get(std::string* why) {
  static GpuDriver* driver = nullptr;
  static std::string reason;
  static bool tried = false;
  if (tried) {
    *why = reason;
    return driver;
  }
  tried = true;
  auto g = new GpuDriver();
  Result<cuda::DriverApi> api = cuda::DriverApi::Load();
  if (!api.ok()) {
    *why = reason = api.status().message();
    return nullptr;
  }
  g->api = api.value();
  void* lib = g->api.library;
  CUresult r = g->api.cuInit(0);
  int count = 0;
  if (r != CUDA_SUCCESS || g->api.cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0) {
    *why = reason = std::string("no CUDA device answers (cuInit: ") + g->api.ErrorName(r) + ")";
    return nullptr;
  }
  bool ok = Resolve(lib, "cuCtxSetCurrent", &g->cuCtxSetCurrent) &&
            Resolve(lib, "cuCtxSynchronize", &g->cuCtxSynchronize) &&
            Resolve(lib, "cuModuleLoadData", &g->cuModuleLoadData) &&
            Resolve(lib, "cuModuleGetFunction", &g->cuModuleGetFunction) &&
            Resolve(lib, "cuLaunchKernel", &g->cuLaunchKernel) &&
            Resolve(lib, "cuMemHostAlloc", &g->cuMemHostAlloc) &&
            Resolve(lib, "cuMemFreeHost", &g->cuMemFreeHost) &&
            Resolve(lib, "cuMemAlloc_v2", &g->cuMemAlloc) &&
            Resolve(lib, "cuMemcpyHtoDAsync_v2", &g->cuMemcpyHtoDAsync) &&
            Resolve(lib, "cuStreamCreate", &g->cuStreamCreate) &&
            Resolve(lib, "cuEventCreate", &g->cuEventCreate) &&
            Resolve(lib, "cuEventRecord", &g->cuEventRecord) &&
            Resolve(lib, "cuEventSynchronize", &g->cuEventSynchronize) &&
            Resolve(lib, "cuEventElapsedTime_v2", &g->cuEventElapsedTime) &&
            Resolve(lib, "cuMemRangeGetAttribute", &g->cuMemRangeGetAttribute);
  if (!ok) {
    *why = reason = "the CUDA driver lacks a function the GPU tests use";
    return nullptr;
  }
  CUmodule module = nullptr;
  if (g->api.cuDeviceGet(&g->device, 0) != CUDA_SUCCESS ||
      g->api.cuDevicePrimaryCtxRetain(&g->context, g->device) != CUDA_SUCCESS ||
      g->cuCtxSetCurrent(g->context) != CUDA_SUCCESS ||
      (r = g->cuModuleLoadData(&module, bench::kTouchPtx)) != CUDA_SUCCESS ||
      g->cuModuleGetFunction(&g->touch, module, "kvtier_touch") != CUDA_SUCCESS ||
      (r = g->cuModuleLoadData(&module, bench::kPageSumsPtx)) != CUDA_SUCCESS ||
      g->cuModuleGetFunction(&g->page_sums, module, "kvtier_page_sums") != CUDA_SUCCESS) {
    *why = reason = std::string("cannot set up GPU 0 (") + g->api.ErrorName(r) + ")";
    return nullptr;
  }
  driver = g;
  return driver;
}

CUresult GpuDriver::Touch(CUdeviceptr base, size_t stride, unsigned count, unsigned value) {
  unsigned long long b = base, s = stride;
  void* params[] = {&b, &s, &count, &value};
  CUresult r =
      cuLaunchKernel(touch, (count + 127) / 128, 1, 1, 128, 1, 1, 0, nullptr, params, nullptr);
  return r == CUDA_SUCCESS ? cuCtxSynchronize() : r;
}

CUresult GpuDriver::PageSums(CUdeviceptr base, size_t page_bytes, unsigned pages, uint64_t* out) {
  unsigned long long b = base, page = page_bytes, o = reinterpret_cast<uintptr_t>(out);
  void* params[] = {&b, &page, &pages, &o};
  CUresult r = cuLaunchKernel(page_sums, pages, 1, 1, 256, 1, 1, 0, nullptr, params, nullptr);
  return r == CUDA_SUCCESS ? cuCtxSynchronize() : r;
}

int GpuDriver::LastPrefetchLocation(CUdeviceptr p, size_t bytes) {
  int location = -2;
  cuMemRangeGetAttribute(&location, sizeof location, CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION,
                         p, bytes);
  return location;
}

}  // namespace kvtier::gpu_test
