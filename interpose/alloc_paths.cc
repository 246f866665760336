// AllocPaths: see alloc_paths.h.
#include "interpose/alloc_paths.h"

#include <atomic>

#include "interpose/cudart_common.h"
#include "interpose/cudart_errors.h"
#include "interpose/launch_scan.h"
#include "runtime/log.h"
#include "start/process.h"

namespace kvtier::interpose {
namespace {

std::atomic<bool> g_region_failure_warned{false};
std::atomic<bool> g_bad_free_warned{false};

}  // namespace

bool TryRegion(Runtime* rt, size_t size, const char* api, const void* caller, void** out) {
  if (rt == nullptr || size == 0 || !rt->ShouldTier(size, caller, api)) return false;
  Result<void*> region = rt->CreateRegion(size, caller);
  if (region.ok()) {
    *out = region.value();
    NoteRegionRange(region.value(), size);
    return true;
  }
  WarnOnce(&g_region_failure_warned,
           "%s(%zu bytes): cannot create a tiered region: %s; allocating plain device memory "
           "instead (later failures are not printed)",
           api, size, region.status().message().c_str());
  return false;
}

bool FreeRegion(Runtime* rt, const void* ptr) {
  return ptr != nullptr && rt != nullptr && rt->FreeRegion(ptr);
}

cudaError_t SimAllocate(void** out, size_t size, const char* api, const void* caller) {
  if (out == nullptr) return cudaErrorInvalidValue;
  if (size == 0) {  // libcudart: success and a null pointer
    *out = nullptr;
    return cudaSuccess;
  }
  Runtime* rt = ProcessRuntime();
  if (TryRegion(rt, size, api, caller, out)) return cudaSuccess;
  cudaError_t err = TheSimCudaRuntime().Alloc(size, RegionDeviceReserve(rt), out);
  if (err == cudaSuccess && rt) Counters::Add(rt->counters().plain_device_bytes, size);
  Log(2, "%s(%zu bytes): plain simulated device memory at %p (%s)", api, size,
      err == cudaSuccess ? *out : nullptr, SimErrorName(err));
  return err;
}

cudaError_t SimRelease(void* ptr, const char* api) {
  if (ptr == nullptr) return cudaSuccess;
  Runtime* rt = ProcessRuntime();
  if (FreeRegion(rt, ptr)) return cudaSuccess;
  size_t bytes = TheSimCudaRuntime().Free(ptr);
  if (bytes == 0) {
    if (rt) Counters::Add(rt->counters().bad_frees);
    WarnOnce(&g_bad_free_warned,
             "%s(%p): not the start of a device allocation (unknown pointer or freed twice); "
             "returning an invalid-value error (later bad frees are counted in bad_frees, not "
             "printed)",
             api, ptr);
    return cudaErrorInvalidValue;
  }
  if (rt) {
    Counters::Sub(rt->counters().plain_device_bytes, bytes);
    Counters::Add(rt->counters().frees);
  }
  return cudaSuccess;
}

cudaError_t SimMemInfo(size_t* free_bytes, size_t* total_bytes) {
  if (free_bytes == nullptr || total_bytes == nullptr) return cudaErrorInvalidValue;
  Runtime* rt = ProcessRuntime();
  SimCudaRuntime& gpu = TheSimCudaRuntime();
  uint64_t total = gpu.total_bytes();
  uint64_t used = gpu.memory().bytes() + RegionDeviceReserve(rt);
  uint64_t extra = OversubscribedBytes(rt);
  *free_bytes = (used < total ? total - used : 0) + extra;
  *total_bytes = total + extra;
  return cudaSuccess;
}

void TrackPlain(Runtime* rt, const void* ptr, size_t size) {
  if (rt == nullptr || ptr == nullptr) return;
  RealPlainAllocations().Reserve(size, UINT64_MAX);
  RealPlainAllocations().Insert(ptr, size);
  Counters::Add(rt->counters().plain_device_bytes, size);
}

void UntrackPlain(Runtime* rt, const void* ptr) {
  if (rt == nullptr || ptr == nullptr) return;
  if (size_t bytes = RealPlainAllocations().Remove(ptr); bytes != 0) {
    Counters::Sub(rt->counters().plain_device_bytes, bytes);
    Counters::Add(rt->counters().frees);
  }
}

void AddOversubscription(size_t* free_bytes, size_t* total_bytes) {
  if (free_bytes == nullptr || total_bytes == nullptr) return;
  uint64_t extra = OversubscribedBytes(ProcessRuntime());
  *free_bytes += extra;
  *total_bytes += extra;
}

CUresult DriverResult(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return CUDA_SUCCESS;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevicePointer:
      return CUDA_ERROR_INVALID_VALUE;
    case cudaErrorMemoryAllocation:
      return CUDA_ERROR_OUT_OF_MEMORY;
    case cudaErrorInvalidDevice:
      return CUDA_ERROR_INVALID_DEVICE;
    case cudaErrorInvalidResourceHandle:
      return CUDA_ERROR_INVALID_HANDLE;
    case cudaErrorNotSupported:
      return CUDA_ERROR_NOT_SUPPORTED;
    case cudaErrorSymbolNotFound:
      return CUDA_ERROR_NOT_FOUND;
    default:
      return CUDA_ERROR_UNKNOWN;
  }
}

}  // namespace kvtier::interpose
