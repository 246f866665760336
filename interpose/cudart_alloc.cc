// CUDA runtime hooks for stream-ordered and managed allocation:
// cudaMallocAsync, cudaFreeAsync (and their _ptsz variants) and
// cudaMallocManaged.
//
// They follow cudaMalloc and cudaFree (alloc_paths.h): a matched allocation
// becomes a tiered region, whatever API made it. A region is usable at once,
// so a stream-ordered allocation of one needs no stream work; a stream-ordered
// free of one first waits for the stream, because work queued before the free
// may still read the region (the real cudaFreeAsync would order the free after
// it). Plain managed memory is not device memory and is not counted as such.
// On the simulated GPU all work is synchronous and managed memory is plain
// simulated memory. Thread-safety: any thread.
#include "interpose/alloc_paths.h"
#include "interpose/cudart_common.h"
#include "interpose/cudart_errors.h"
#include "interpose/hook_table.h"
#include "interpose/preload.h"
#include "start/process.h"

using kvtier::ProcessRuntime;
using kvtier::Runtime;
using namespace kvtier::interpose;

namespace {

template <HookId id>
cudaError_t MallocAsync(void** devPtr, size_t size, cudaStream_t stream, const void* caller) {
  HookScope scope;
  switch (scope.mode()) {
    case Mode::kPassThrough:
      break;
    case Mode::kSim:
      if (!TheSimCudaRuntime().ValidStream(stream))
        return SimResult(cudaErrorInvalidResourceHandle);
      return SimResult(NoThrow([&] { return SimAllocate(devPtr, size, HookName(id), caller); }));
    case Mode::kTier:
      return NoThrow([&] {
        Runtime* rt = ProcessRuntime();
        if (devPtr != nullptr && TryRegion(rt, size, HookName(id), caller, devPtr)) {
          return cudaSuccess;
        }
        cudaError_t err = CallReal<id>(devPtr, size, stream);
        if (err == cudaSuccess && devPtr != nullptr) TrackPlain(rt, *devPtr, size);
        return err;
      });
  }
  return CallReal<id>(devPtr, size, stream);
}

template <HookId id>
cudaError_t FreeAsync(void* devPtr, cudaStream_t stream) {
  HookScope scope;
  switch (scope.mode()) {
    case Mode::kPassThrough:
      break;
    case Mode::kSim:
      if (!TheSimCudaRuntime().ValidStream(stream))
        return SimResult(cudaErrorInvalidResourceHandle);
      return SimResult(NoThrow([&] { return SimRelease(devPtr, HookName(id)); }));
    case Mode::kTier:
      return NoThrow([&] {
        Runtime* rt = ProcessRuntime();
        if (devPtr != nullptr && RegionCovering(rt, devPtr, 1) != nullptr) {
          cudaError_t err = CallReal<HookId::cudaStreamSynchronize>(stream);
          if (err != cudaSuccess) return err;
          if (FreeRegion(rt, devPtr)) return cudaSuccess;
        }
        UntrackPlain(rt, devPtr);
        return CallReal<id>(devPtr, stream);
      });
  }
  return CallReal<id>(devPtr, stream);
}

}  // namespace

extern "C" {

cudaError_t cudaMallocAsync(void** devPtr, size_t size, cudaStream_t hStream) {
  return MallocAsync<HookId::cudaMallocAsync>(devPtr, size, hStream, __builtin_return_address(0));
}

cudaError_t cudaMallocAsync_ptsz(void** devPtr, size_t size, cudaStream_t hStream) {
  return MallocAsync<HookId::cudaMallocAsync_ptsz>(devPtr, size, hStream,
                                                   __builtin_return_address(0));
}

cudaError_t cudaFreeAsync(void* devPtr, cudaStream_t hStream) {
  return FreeAsync<HookId::cudaFreeAsync>(devPtr, hStream);
}

cudaError_t cudaFreeAsync_ptsz(void* devPtr, cudaStream_t hStream) {
  return FreeAsync<HookId::cudaFreeAsync_ptsz>(devPtr, hStream);
}

cudaError_t cudaMallocManaged(void** devPtr, size_t size, unsigned int flags) {
  HookScope scope;
  const void* caller = __builtin_return_address(0);
  switch (scope.mode()) {
    case Mode::kPassThrough:
      break;
    case Mode::kSim:
      // libcudart's rules: one attach flag, and no empty allocation.
      if (devPtr == nullptr || size == 0 ||
          (flags != cudaMemAttachGlobal && flags != cudaMemAttachHost)) {
        return SimResult(cudaErrorInvalidValue);
      }
      return SimResult(
          NoThrow([&] { return SimAllocate(devPtr, size, "cudaMallocManaged", caller); }));
    case Mode::kTier:
      return NoThrow([&] {
        if (devPtr != nullptr &&
            TryRegion(ProcessRuntime(), size, "cudaMallocManaged", caller, devPtr)) {
          return cudaSuccess;
        }
        return CallReal<HookId::cudaMallocManaged>(devPtr, size, flags);
      });
  }
  return CallReal<HookId::cudaMallocManaged>(devPtr, size, flags);
}

}  // extern "C"
