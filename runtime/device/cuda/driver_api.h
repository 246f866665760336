// DriverApi: the CUDA driver functions the CUDA backend calls, resolved from
// libcuda.so.1 at run time.
//
// The backend uses the driver API, not the runtime API, for everything it
// does itself: its calls must never reach kvtier's own hooks (a cudaMalloc or
// cudaMemPrefetchAsync from the backend would be matched, tiered or turned
// into a hint), must not change the engine thread's sticky runtime error
// (cudaGetLastError), and must work in a process whose runtime is linked
// statically. The pointers come from libc's dlsym (real_dl.h), so kvtier's
// dlsym hook never hands the backend its own wrappers.
//
// Unified-memory calls exist in two forms, both resolved when present:
//   CUDA 12.2+ / 13   cuMemPrefetchAsync_v2 and cuMemAdvise_v2 take a
//                     CUmemLocation (what cuda.h 13 calls cuMemPrefetchAsync
//                     and cuMemAdvise, and what cudaMemPrefetchAsync and
//                     cudaMemAdvise take in CUDA 13);
//   CUDA <= 12.1      cuMemPrefetchAsync and cuMemAdvise take a device ordinal,
//                     CU_DEVICE_CPU for the host (the CUDA 12 runtime
//                     signatures).
// The location form is used where the driver has it (and the headers the
// backend was built with know CU_MEM_LOCATION_TYPE_HOST); the ordinal form
// otherwise. Thread-safety: immutable after Load.
#pragma once

#include <cuda.h>

#include "runtime/status.h"

namespace kvtier::cuda {

struct DriverApi {
  void* library = nullptr;  // the dlopen handle of libcuda.so.1 (never closed)

  CUresult (*cuInit)(unsigned int) = nullptr;
  CUresult (*cuDriverGetVersion)(int*) = nullptr;
  CUresult (*cuDeviceGetCount)(int*) = nullptr;
  CUresult (*cuDeviceGet)(CUdevice*, int) = nullptr;
  CUresult (*cuDeviceGetAttribute)(int*, CUdevice_attribute, CUdevice) = nullptr;
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice) = nullptr;  // _v2
  CUresult (*cuCtxGetDevice)(CUdevice*) = nullptr;
  CUresult (*cuCtxPushCurrent)(CUcontext) = nullptr;  // _v2
  CUresult (*cuCtxPopCurrent)(CUcontext*) = nullptr;  // _v2
  CUresult (*cuCtxGetStreamPriorityRange)(int*, int*) = nullptr;
  CUresult (*cuStreamCreateWithPriority)(CUstream*, unsigned int, int) = nullptr;
  CUresult (*cuStreamSynchronize)(CUstream) = nullptr;
  CUresult (*cuStreamDestroy)(CUstream) = nullptr;       // _v2
  CUresult (*cuMemGetInfo)(size_t*, size_t*) = nullptr;  // _v2
  CUresult (*cuMemAllocManaged)(CUdeviceptr*, size_t, unsigned int) = nullptr;
  CUresult (*cuMemFree)(CUdeviceptr) = nullptr;  // _v2
  CUresult (*cuGetErrorName)(CUresult, const char**) = nullptr;
  CUresult (*cuDeviceGetName)(char*, int, CUdevice) = nullptr;  // optional: messages only

  // Unified memory, location form (may be null on old drivers).
  CUresult (*cuMemPrefetchAsyncLocation)(CUdeviceptr, size_t, CUmemLocation, unsigned int,
                                         CUstream) = nullptr;
  CUresult (*cuMemAdviseLocation)(CUdeviceptr, size_t, CUmem_advise, CUmemLocation) = nullptr;
  // Unified memory, device-ordinal form (may be null on new drivers).
  CUresult (*cuMemPrefetchAsyncDevice)(CUdeviceptr, size_t, CUdevice, CUstream) = nullptr;
  CUresult (*cuMemAdviseDevice)(CUdeviceptr, size_t, CUmem_advise, CUdevice) = nullptr;
  // CUDA 13's batch calls (null before): several ranges in one call. The
  // disk tier needs the discard: it frees a spilled page's memory without
  // a copy back (no CUDA 12 call does).
  CUresult (*cuMemPrefetchBatchAsync)(CUdeviceptr*, size_t*, size_t, CUmemLocation*, size_t*,
                                      size_t, unsigned long long, CUstream) = nullptr;
  CUresult (*cuMemDiscardBatchAsync)(CUdeviceptr*, size_t*, size_t, unsigned long long,
                                     CUstream) = nullptr;
  // Waits for all work of the current context (the disk tier's fence).
  CUresult (*cuCtxSynchronize)() = nullptr;

  // Loads libcuda.so.1 (the program's copy when it has one) and resolves the
  // functions; fails, naming what is missing, when there is no driver.
  static Result<DriverApi> Load();

  // "CUDA_ERROR_OUT_OF_MEMORY" for people; the number when the driver has no name.
  const char* ErrorName(CUresult r) const;

  // Prefetches [ptr, ptr+bytes) to `device` (to_host: to host memory) on
  // `stream`, through whichever form the driver has.
  CUresult Prefetch(CUdeviceptr ptr, size_t bytes, bool to_host, CUdevice device,
                    CUstream stream) const;
  // Prefetches each range to `device` (to_host: to the host) on `stream`: one
  // batch call where the driver has it, else one call per range.
  CUresult PrefetchRanges(CUdeviceptr* ptrs, size_t* sizes, size_t count, bool to_host,
                          CUdevice device, CUstream stream) const;
  // Discards each range on `stream` (cuMemDiscardBatchAsync; the caller
  // checks that the driver has it).
  CUresult DiscardRanges(CUdeviceptr* ptrs, size_t* sizes, size_t count, CUstream stream) const;
  // Sets or unsets `device` (to_host: the host) as the preferred location.
  CUresult PreferLocation(CUdeviceptr ptr, size_t bytes, bool set, bool to_host,
                          CUdevice device) const;
};

}  // namespace kvtier::cuda
