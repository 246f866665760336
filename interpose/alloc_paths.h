// AllocPaths: what every allocation and free hook does, whichever API it
// interposes (cudaMalloc, cudaMallocAsync, cudaMallocManaged, cuMemAlloc_v2,
// cuMemAllocAsync, cuMemAllocManaged and their frees).
//
// An allocation first asks the runtime whether it becomes a tiered region
// (KVTIER_MATCH); otherwise it is plain device memory: simulated on the sim
// backend, the real function's on a GPU (kvtier only counts it). A free of a
// region's base frees the region, whatever API allocated it; anything else
// goes where it would have gone. Codes are the runtime API's; the driver hooks
// translate them (DriverResult). Thread-safety: any thread.
#pragma once

#include <cstddef>

#include "interpose/cuda_api.h"
#include "runtime/runtime.h"

namespace kvtier::interpose {

// Places an allocation of `size` bytes from `caller` (a return address) in a
// tiered region when the match rule says so. False: allocate plain (no
// runtime, not matched, or the region could not be made: warned once).
// `api` names the hook in that warning.
bool TryRegion(Runtime* rt, size_t size, const char* api, const void* caller, void** out);
// Frees the region whose base is `ptr`; false when there is none (then the
// caller frees it the way it would have without kvtier).
bool FreeRegion(Runtime* rt, const void* ptr);

// The simulated GPU's allocation, free and memory information.
// SimAllocate: size 0 gives success and a null pointer (cudaMalloc's rule;
// callers with another rule check first). SimRelease: nullptr is success; an
// unknown or interior pointer is counted and warned once, and fails with
// cudaErrorInvalidValue.
cudaError_t SimAllocate(void** out, size_t size, const char* api, const void* caller);
cudaError_t SimRelease(void* ptr, const char* api);
cudaError_t SimMemInfo(size_t* free_bytes, size_t* total_bytes);

// kTier mode: counts a plain device allocation made by a real function, and
// forgets it again when it is freed (unknown pointers are ignored: the real
// free decides about them).
void TrackPlain(Runtime* rt, const void* ptr, size_t size);
void UntrackPlain(Runtime* rt, const void* ptr);

// kTier mode: adds KVTIER_OVERSUBSCRIBE's share to a successful real memory
// information call (cudaMemGetInfo, cuMemGetInfo_v2).
void AddOversubscription(size_t* free_bytes, size_t* total_bytes);

// The driver API's code for a runtime API code the simulated paths return.
CUresult DriverResult(cudaError_t error);

inline void* AsPointer(CUdeviceptr p) { return reinterpret_cast<void*>(static_cast<uintptr_t>(p)); }
inline CUdeviceptr AsDevicePtr(const void* p) {
  return static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(p));
}

}  // namespace kvtier::interpose
