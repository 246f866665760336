// GpuDriver: what the GPU tests need from the CUDA driver beyond the
// backend's own DriverApi: a context, kernels that touch and sum pages (PTX
// from tools/bench/gpu_kernels.h, compiled by the driver at load time, so the
// tests need no nvcc), events,
// pinned memory and plain device memory for the reference copy, and the
// driver's view of where a managed range was last prefetched.
// Get() answers nullptr, with the reason, when no CUDA device answers: the
// tests then skip. Thread-safety: the tests use it from one thread.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/device/cuda/driver_api.h"

namespace kvtier::gpu_test {

struct GpuDriver {
  cuda::DriverApi api;
  CUdevice device = 0;
  CUcontext context = nullptr;
  CUfunction touch = nullptr;      // tools/bench/gpu_kernels.h
  CUfunction page_sums = nullptr;  // idem

  CUresult (*cuCtxSetCurrent)(CUcontext) = nullptr;
  CUresult (*cuCtxSynchronize)() = nullptr;
  CUresult (*cuModuleLoadData)(CUmodule*, const void*) = nullptr;
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*) = nullptr;
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, CUstream, void**, void**) = nullptr;
  CUresult (*cuMemHostAlloc)(void**, size_t, unsigned) = nullptr;
  CUresult (*cuMemFreeHost)(void*) = nullptr;
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t) = nullptr;                               // _v2
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void*, size_t, CUstream) = nullptr;  // _v2
  CUresult (*cuStreamCreate)(CUstream*, unsigned) = nullptr;
  CUresult (*cuEventCreate)(CUevent*, unsigned) = nullptr;
  CUresult (*cuEventRecord)(CUevent, CUstream) = nullptr;
  CUresult (*cuEventSynchronize)(CUevent) = nullptr;
  CUresult (*cuEventElapsedTime)(float*, CUevent, CUevent) = nullptr;
  CUresult (*cuMemRangeGetAttribute)(void*, size_t, CUmem_range_attribute, CUdeviceptr,
                                     size_t) = nullptr;

  // The process's driver, or nullptr with *why set.
  static GpuDriver* Get(std::string* why);

  // Launches touch over `count` pages of `stride` bytes from `base`, writing
  // `value` to the first byte of each, and waits for it.
  CUresult Touch(CUdeviceptr base, size_t stride, unsigned count, unsigned value);
  // Launches page_sums over `pages` pages of `page_bytes` from `base` into
  // out[] (managed or host-visible, zeroed by the caller), and waits for it.
  CUresult PageSums(CUdeviceptr base, size_t page_bytes, unsigned pages, uint64_t* out);
  // The device the range was last prefetched to (CU_DEVICE_CPU: the host).
  int LastPrefetchLocation(CUdeviceptr p, size_t bytes);
};

}  // namespace kvtier::gpu_test
