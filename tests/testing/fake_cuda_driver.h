// A fake CUDA driver for the CUDA backend's tests (label cuda, no GPU
// needed): GPUs that exist as bookkeeping, primary contexts and a context
// stack per process, managed memory that is host memory, and a record of
// the calls that can be made to fail (in order), every prefetch, advice,
// discard and context synchronisation.
// A discard overwrites the range with kPoison: the driver says discarded
// bytes are indeterminate, and a test that reads them must see that it did.
// State is one global (tests run one at a time in a process); Reset starts
// a test afresh.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "runtime/device/cuda/driver_api.h"

namespace kvtier::cuda::fake {

constexpr uint8_t kPoison = 0xDB;

struct Prefetch {
  CUdeviceptr ptr;
  size_t bytes;
  int device;  // -1: the host
  CUstream stream;
  bool discarded = false;  // every byte still the discard's poison when it was asked for
};

struct Allocation {
  size_t bytes;
  int device;  // the GPU whose context was current
};

struct Advice {
  CUdeviceptr ptr;
  size_t bytes;
  CUmem_advise advice;
  int device;  // its location; -1: the host
};

struct Driver {
  int gpus = 1;
  std::vector<size_t> free_bytes;  // per GPU
  // cuCtxGetDevice's answer when kvtier pushed no context; -1: none is
  // current (it fails with CUDA_ERROR_INVALID_CONTEXT, as do the calls that
  // need one).
  int engine_device = 0;
  std::vector<int> pushed;         // the context stack, as GPU ordinals
  int managed = 1;                 // cuDeviceGetAttribute's answer (managed memory, ...)
  std::vector<std::string> calls;  // the functions `failing` can name, as called
  std::vector<Prefetch> prefetches;
  std::vector<Advice> advice;
  std::vector<std::pair<CUdeviceptr, size_t>> discards;
  std::map<CUdeviceptr, Allocation> allocations;  // alive
  int allocated = 0, freed = 0;                   // cuMemAllocManaged, cuMemFree calls that worked
  int retained = 0, released = 0;
  int ctx_syncs = 0;
  int streams = 0;
  int stream_priority = 99;  // the last stream's
  std::string failing;       // a function that fails ("" for none)
  // Runs inside cuCtxSynchronize (what other threads do while a fence waits).
  std::function<void()> on_ctx_sync;
};

// The fake's state.
Driver& State();
// Starts afresh with `gpus` GPUs of `free_per_gpu` free bytes each.
void Reset(int gpus, size_t free_per_gpu);
// The primary context of a GPU (what cuDevicePrimaryCtxRetain hands out).
CUcontext ContextOf(int device);
// The stream made while `device`'s context was current.
CUstream StreamOf(int device);
// Every function the backend calls, pointing at the fake. `batch_calls`:
// whether the CUDA 13 batch calls (prefetch, discard) exist.
DriverApi Api(bool batch_calls = true);
// The allocation holding `ptr`, or null.
const Allocation* AllocationAt(CUdeviceptr ptr);

// A driver for benchmarks on a machine without a GPU (`kvtier-bench spill
// --cuda host`), apart from the fake above: managed memory is anonymous
// memory, 2 MiB-aligned in huge pages where the kernel gives them (the
// driver backs managed memory in large pages too); a discard frees it
// (MADV_DONTNEED, as the driver frees a discarded range); prefetches,
// advice and streams do nothing, and nothing is recorded, so that a
// benchmark times kvtier's own path. Thread-safe.
DriverApi HostApi();

}  // namespace kvtier::cuda::fake
