// DriverApi: see driver_api.h.
#include "runtime/device/cuda/driver_api.h"

#include <dlfcn.h>

#include <cstdio>
#include <string>

#include "runtime/device/cuda/real_dl.h"

namespace kvtier::cuda {
namespace {

template <typename Fn>
bool Resolve(void* lib, const char* name, Fn* out) {
  *out = reinterpret_cast<Fn>(RealDlsym(lib, name));
  return *out != nullptr;
}

}  // namespace

Result<DriverApi> DriverApi::Load() {
  DriverApi api;
  api.library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (api.library == nullptr) api.library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (api.library == nullptr) {
    return Status::Errorf("no CUDA driver: cannot load libcuda.so.1 (%s)", dlerror());
  }
  std::string missing;
  auto need = [&](const char* name, auto* fn) {
    if (!Resolve(api.library, name, fn)) missing += std::string(missing.empty() ? "" : ", ") + name;
  };
  need("cuInit", &api.cuInit);
  need("cuDriverGetVersion", &api.cuDriverGetVersion);
  need("cuDeviceGetCount", &api.cuDeviceGetCount);
  need("cuDeviceGet", &api.cuDeviceGet);
  need("cuDeviceGetAttribute", &api.cuDeviceGetAttribute);
  need("cuDevicePrimaryCtxRetain", &api.cuDevicePrimaryCtxRetain);
  need("cuDevicePrimaryCtxRelease_v2", &api.cuDevicePrimaryCtxRelease);
  need("cuCtxGetDevice", &api.cuCtxGetDevice);
  need("cuCtxPushCurrent_v2", &api.cuCtxPushCurrent);
  need("cuCtxPopCurrent_v2", &api.cuCtxPopCurrent);
  need("cuCtxGetStreamPriorityRange", &api.cuCtxGetStreamPriorityRange);
  need("cuStreamCreateWithPriority", &api.cuStreamCreateWithPriority);
  need("cuStreamSynchronize", &api.cuStreamSynchronize);
  need("cuStreamDestroy_v2", &api.cuStreamDestroy);
  need("cuMemGetInfo_v2", &api.cuMemGetInfo);
  need("cuMemAllocManaged", &api.cuMemAllocManaged);
  need("cuMemFree_v2", &api.cuMemFree);
  need("cuGetErrorName", &api.cuGetErrorName);
  Resolve(api.library, "cuDeviceGetName", &api.cuDeviceGetName);
#if CUDA_VERSION >= 12020
  Resolve(api.library, "cuMemPrefetchAsync_v2", &api.cuMemPrefetchAsyncLocation);
  Resolve(api.library, "cuMemAdvise_v2", &api.cuMemAdviseLocation);
#endif
#if CUDA_VERSION >= 13000
  Resolve(api.library, "cuMemPrefetchBatchAsync", &api.cuMemPrefetchBatchAsync);
  Resolve(api.library, "cuMemDiscardBatchAsync", &api.cuMemDiscardBatchAsync);
#endif
  Resolve(api.library, "cuCtxSynchronize", &api.cuCtxSynchronize);
  // Unversioned names: the device-ordinal form in every driver that has them.
  Resolve(api.library, "cuMemPrefetchAsync", &api.cuMemPrefetchAsyncDevice);
  Resolve(api.library, "cuMemAdvise", &api.cuMemAdviseDevice);
  if (api.cuMemPrefetchAsyncLocation == nullptr && api.cuMemPrefetchAsyncDevice == nullptr)
    missing += std::string(missing.empty() ? "" : ", ") + "cuMemPrefetchAsync";
  if (api.cuMemAdviseLocation == nullptr && api.cuMemAdviseDevice == nullptr)
    missing += std::string(missing.empty() ? "" : ", ") + "cuMemAdvise";
  if (!missing.empty()) {
    return Status::Error("the CUDA driver (libcuda.so.1) lacks " + missing +
                         "; update the NVIDIA driver");
  }
  return api;
}

const char* DriverApi::ErrorName(CUresult r) const {
  const char* name = nullptr;
  if (cuGetErrorName != nullptr && cuGetErrorName(r, &name) == CUDA_SUCCESS && name != nullptr)
    return name;
  static thread_local char buf[32];
  snprintf(buf, sizeof buf, "CUresult %d", static_cast<int>(r));
  return buf;
}

CUresult DriverApi::Prefetch(CUdeviceptr ptr, size_t bytes, bool to_host, CUdevice device,
                             CUstream stream) const {
#if CUDA_VERSION >= 12020
  if (cuMemPrefetchAsyncLocation != nullptr) {
    CUmemLocation loc{};
    loc.type = to_host ? CU_MEM_LOCATION_TYPE_HOST : CU_MEM_LOCATION_TYPE_DEVICE;
    loc.id = to_host ? 0 : device;
    return cuMemPrefetchAsyncLocation(ptr, bytes, loc, 0, stream);
  }
#endif
  return cuMemPrefetchAsyncDevice(ptr, bytes, to_host ? CU_DEVICE_CPU : device, stream);
}

CUresult DriverApi::PrefetchRanges(CUdeviceptr* ptrs, size_t* sizes, size_t count, bool to_host,
                                   CUdevice device, CUstream stream) const {
  if (count == 0) return CUDA_SUCCESS;
  if (cuMemPrefetchBatchAsync != nullptr && count > 1) {
    CUmemLocation loc{};
    loc.type = to_host ? CU_MEM_LOCATION_TYPE_HOST : CU_MEM_LOCATION_TYPE_DEVICE;
    loc.id = to_host ? 0 : device;
    size_t first = 0;  // one location for the whole batch, from operation 0
    return cuMemPrefetchBatchAsync(ptrs, sizes, count, &loc, &first, 1, 0, stream);
  }
  for (size_t i = 0; i < count; ++i) {
    if (CUresult r = Prefetch(ptrs[i], sizes[i], to_host, device, stream); r != CUDA_SUCCESS)
      return r;
  }
  return CUDA_SUCCESS;
}

CUresult DriverApi::DiscardRanges(CUdeviceptr* ptrs, size_t* sizes, size_t count,
                                  CUstream stream) const {
  if (count == 0) return CUDA_SUCCESS;
  if (cuMemDiscardBatchAsync == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  return cuMemDiscardBatchAsync(ptrs, sizes, count, 0, stream);
}

CUresult DriverApi::PreferLocation(CUdeviceptr ptr, size_t bytes, bool set, bool to_host,
                                   CUdevice device) const {
  const CUmem_advise advice =
      set ? CU_MEM_ADVISE_SET_PREFERRED_LOCATION : CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION;
#if CUDA_VERSION >= 12020
  if (cuMemAdviseLocation != nullptr) {
    CUmemLocation loc{};
    loc.type = to_host ? CU_MEM_LOCATION_TYPE_HOST : CU_MEM_LOCATION_TYPE_DEVICE;
    loc.id = to_host ? 0 : device;
    return cuMemAdviseLocation(ptr, bytes, advice, loc);
  }
#endif
  return cuMemAdviseDevice(ptr, bytes, advice, to_host ? CU_DEVICE_CPU : device);
}

}  // namespace kvtier::cuda
