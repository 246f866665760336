// MeasureGpu (calibrate.h): GPU memory and managed-memory prefetch bandwidth
// through the CUDA backend's DriverApi, so the same driver calls the
// backend makes are the ones timed. Thread-safety: single-threaded tool.
#include "tools/bench/calibrate.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#ifdef KVTIER_HAVE_CUDA
#include "runtime/device/cuda/driver_api.h"
#endif

namespace kvtier::bench {

#ifndef KVTIER_HAVE_CUDA

GpuFigures MeasureGpu(uint64_t) {
  GpuFigures g;
  g.note = "not measured: this build has no CUDA backend (KVTIER_WITH_CUDA=OFF)";
  return g;
}

#else

namespace {

double Seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Runs with the device's primary context current; releases what it took.
GpuFigures MeasureInContext(const cuda::DriverApi& api, CUdevice device, uint64_t bytes) {
  GpuFigures g;
  char name[128] = "";
  if (api.cuDeviceGetName == nullptr ||
      api.cuDeviceGetName(name, sizeof name, device) != CUDA_SUCCESS) {
    snprintf(name, sizeof name, "unnamed");
  }
  g.device = "GPU " + std::to_string(static_cast<int>(device)) + " (" + name + ")";
  size_t free_bytes = 0, total = 0;
  CUresult r = api.cuMemGetInfo(&free_bytes, &total);
  if (r != CUDA_SUCCESS) {
    g.note = std::string("not measured: cuMemGetInfo failed with ") + api.ErrorName(r);
    return g;
  }
  // A quarter of what is free at most: never ask for more managed memory
  // than the device can hold next to whatever else runs on it.
  constexpr uint64_t kBlock = uint64_t{2} << 20;
  bytes = std::min<uint64_t>(bytes, free_bytes / 4) / kBlock * kBlock;
  if (bytes < kBlock) {
    g.note = "not measured: under 8 MiB of GPU memory free";
    return g;
  }
  CUdeviceptr ptr = 0;
  if ((r = api.cuMemAllocManaged(&ptr, bytes, CU_MEM_ATTACH_GLOBAL)) != CUDA_SUCCESS) {
    g.note = std::string("not measured: cuMemAllocManaged failed with ") + api.ErrorName(r);
    return g;
  }
  CUstream stream = nullptr;
  if ((r = api.cuStreamCreateWithPriority(&stream, CU_STREAM_NON_BLOCKING, 0)) != CUDA_SUCCESS) {
    api.cuMemFree(ptr);
    g.note = std::string("not measured: cuStreamCreateWithPriority failed with ") +
             api.ErrorName(r);
    return g;
  }
  // Populate on the host, so every prefetch moves every page.
  memset(reinterpret_cast<void*>(ptr), 1, bytes);
  std::vector<double> seconds;
  for (int i = 0; i < 3 && r == CUDA_SUCCESS; ++i) {
    double t0 = Seconds();
    r = api.Prefetch(ptr, bytes, /*to_host=*/false, device, stream);
    if (r == CUDA_SUCCESS) r = api.cuStreamSynchronize(stream);
    seconds.push_back(Seconds() - t0);
    if (r == CUDA_SUCCESS) r = api.Prefetch(ptr, bytes, /*to_host=*/true, device, stream);
    if (r == CUDA_SUCCESS) r = api.cuStreamSynchronize(stream);
  }
  api.cuStreamDestroy(stream);
  api.cuMemFree(ptr);
  if (r != CUDA_SUCCESS) {
    g.note = std::string("not measured: prefetch failed with ") + api.ErrorName(r);
    return g;
  }
  std::sort(seconds.begin(), seconds.end());
  g.measured = true;
  g.memory_bytes = static_cast<double>(total);
  g.prefetch_bytes = bytes;
  g.prefetch_bps = static_cast<double>(bytes) / seconds[1];
  g.note = "measured on " + g.device;
  return g;
}

}  // namespace

GpuFigures MeasureGpu(uint64_t bytes) {
  GpuFigures g;
  Result<cuda::DriverApi> loaded = cuda::DriverApi::Load();
  if (!loaded.ok()) {
    g.note = "not measured: " + loaded.status().message();
    return g;
  }
  const cuda::DriverApi& api = loaded.value();
  CUresult r = api.cuInit(0);
  int count = 0;
  if (r == CUDA_SUCCESS) r = api.cuDeviceGetCount(&count);
  if (r != CUDA_SUCCESS || count == 0) {
    g.note = std::string("not measured: no GPU (") +
             (r != CUDA_SUCCESS ? api.ErrorName(r) : "the driver sees no device") + ")";
    return g;
  }
  CUdevice device = 0;
  int managed = 0;
  if ((r = api.cuDeviceGet(&device, 0)) == CUDA_SUCCESS) {
    api.cuDeviceGetAttribute(&managed, CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, device);
  }
  if (r != CUDA_SUCCESS || !managed) {
    g.note = "not measured: GPU 0 has no concurrent managed memory access";
    return g;
  }
  CUcontext context = nullptr;
  if ((r = api.cuDevicePrimaryCtxRetain(&context, device)) != CUDA_SUCCESS ||
      (r = api.cuCtxPushCurrent(context)) != CUDA_SUCCESS) {
    if (context != nullptr) api.cuDevicePrimaryCtxRelease(device);
    g.note = std::string("not measured: no context on GPU 0 (") + api.ErrorName(r) + ")";
    return g;
  }
  g = MeasureInContext(api, device, bytes);
  CUcontext popped;
  api.cuCtxPopCurrent(&popped);
  api.cuDevicePrimaryCtxRelease(device);
  return g;
}

#endif  // KVTIER_HAVE_CUDA

}  // namespace kvtier::bench
