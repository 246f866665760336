// CUDA driver memory hooks: cuMemAlloc_v2, cuMemFree_v2, cuMemAllocManaged,
// cuMemGetInfo_v2, cuMemAllocAsync and cuMemFreeAsync (and _ptsz).
//
// Engines and the CUDA runtime reach these through the dynamic linker (a
// program linked with -lcuda), through dlsym on libcuda's handle and through
// cuGetProcAddress (dlsym_hook.cc, driver_entry.cc): all three lead here. They
// do what the runtime API hooks do (alloc_paths.h), in the driver's codes:
//   kPassThrough  the real function, unchanged.
//   kSim          the simulated GPU serves allocation, free and memory
//                 information, so a driver-API program sees the same device as
//                 a runtime-API one (cuMemGetInfo_v2 includes
//                 KVTIER_OVERSUBSCRIBE's share, as cudaMemGetInfo does).
//   kTier         a matched allocation becomes a tiered region; the rest calls
//                 the real function and is counted; cuMemGetInfo_v2 adds the
//                 oversubscription share to the real answer.
// A call the CUDA runtime makes while serving a hooked runtime call (cudaMalloc
// -> cuMemAlloc_v2) runs inside that hook's scope and passes straight through,
// so nothing is matched or counted twice. Thread-safety: any thread.
#include "interpose/alloc_paths.h"
#include "interpose/cudart_common.h"
#include "interpose/hook_table.h"
#include "interpose/preload.h"
#include "start/process.h"

using kvtier::ProcessRuntime;
using kvtier::Runtime;
using namespace kvtier::interpose;

namespace {

// NoThrow for driver codes.
template <typename F>
CUresult DriverNoThrow(F&& body) {
  CUresult result = CUDA_ERROR_UNKNOWN;
  cudaError_t err = NoThrow([&] {
    result = body();
    return cudaSuccess;
  });
  return err == cudaSuccess ? result : DriverResult(err);
}

CUresult SimDriverAlloc(CUdeviceptr* dptr, size_t size, const char* api, const void* caller) {
  // cuMemAlloc's rules: an output pointer, and no empty allocation.
  if (dptr == nullptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
  void* p = nullptr;
  cudaError_t err = SimAllocate(&p, size, api, caller);
  if (err == cudaSuccess) *dptr = AsDevicePtr(p);
  return DriverResult(err);
}

// A plain driver allocation in kTier mode: counted, unless it is managed.
template <HookId id, typename... Rest>
CUresult TierDriverAlloc(CUdeviceptr* dptr, size_t size, const void* caller, bool count_plain,
                         Rest... rest) {
  Runtime* rt = ProcessRuntime();
  void* region = nullptr;
  if (dptr != nullptr && TryRegion(rt, size, HookName(id), caller, &region)) {
    *dptr = AsDevicePtr(region);
    return CUDA_SUCCESS;
  }
  CUresult r = CallReal<id>(dptr, size, rest...);
  if (r == CUDA_SUCCESS && dptr != nullptr && count_plain) TrackPlain(rt, AsPointer(*dptr), size);
  return r;
}

template <HookId id>
CUresult MemAllocAsync(CUdeviceptr* dptr, size_t size, CUstream stream, const void* caller) {
  HookScope scope;
  switch (scope.mode()) {
    case Mode::kPassThrough:
      break;
    case Mode::kSim:
      return DriverNoThrow([&] {
        if (!TheSimCudaRuntime().ValidStream(reinterpret_cast<cudaStream_t>(stream)))
          return CUDA_ERROR_INVALID_HANDLE;
        return SimDriverAlloc(dptr, size, HookName(id), caller);
      });
    case Mode::kTier:
      return DriverNoThrow(
          [&] { return TierDriverAlloc<id>(dptr, size, caller, /*count_plain=*/true, stream); });
  }
  return CallReal<id>(dptr, size, stream);
}

template <HookId id>
CUresult MemFreeAsync(CUdeviceptr dptr, CUstream stream) {
  HookScope scope;
  switch (scope.mode()) {
    case Mode::kPassThrough:
      break;
    case Mode::kSim:
      return DriverNoThrow([&] {
        if (!TheSimCudaRuntime().ValidStream(reinterpret_cast<cudaStream_t>(stream)))
          return CUDA_ERROR_INVALID_HANDLE;
        return DriverResult(SimRelease(AsPointer(dptr), HookName(id)));
      });
    case Mode::kTier:
      return DriverNoThrow([&] {
        Runtime* rt = ProcessRuntime();
        void* p = AsPointer(dptr);
        if (p != nullptr && RegionCovering(rt, p, 1) != nullptr) {
          // Work queued on the stream before the free may still use the region.
          using SyncFn = CUresult (*)(CUstream);
          auto sync = reinterpret_cast<SyncFn>(RealDriverSymbol("cuStreamSynchronize"));
          if (sync == nullptr) return CUDA_ERROR_NOT_FOUND;
          if (CUresult r = sync(stream); r != CUDA_SUCCESS) return r;
          if (FreeRegion(rt, p)) return CUDA_SUCCESS;
        }
        UntrackPlain(rt, p);
        return CallReal<id>(dptr, stream);
      });
  }
  return CallReal<id>(dptr, stream);
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  HookScope scope;
  const void* caller = __builtin_return_address(0);
  switch (scope.mode()) {
    case Mode::kPassThrough:
      break;
    case Mode::kSim:
      return DriverNoThrow([&] { return SimDriverAlloc(dptr, bytesize, "cuMemAlloc_v2", caller); });
    case Mode::kTier:
      return DriverNoThrow(
          [&] { return TierDriverAlloc<HookId::cuMemAlloc_v2>(dptr, bytesize, caller, true); });
  }
  return CallReal<HookId::cuMemAlloc_v2>(dptr, bytesize);
}

CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr) {
  HookScope scope;
  switch (scope.mode()) {
    case Mode::kPassThrough:
      break;
    case Mode::kSim:
      return DriverNoThrow(
          [&] { return DriverResult(SimRelease(AsPointer(dptr), "cuMemFree_v2")); });
    case Mode::kTier:
      return DriverNoThrow([&] {
        Runtime* rt = ProcessRuntime();
        if (FreeRegion(rt, AsPointer(dptr))) return CUDA_SUCCESS;
        UntrackPlain(rt, AsPointer(dptr));
        return CallReal<HookId::cuMemFree_v2>(dptr);
      });
  }
  return CallReal<HookId::cuMemFree_v2>(dptr);
}

CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  HookScope scope;
  const void* caller = __builtin_return_address(0);
  switch (scope.mode()) {
    case Mode::kPassThrough:
      break;
    case Mode::kSim:
      if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)
        return CUDA_ERROR_INVALID_VALUE;
      return DriverNoThrow(
          [&] { return SimDriverAlloc(dptr, bytesize, "cuMemAllocManaged", caller); });
    case Mode::kTier:
      return DriverNoThrow([&] {
        return TierDriverAlloc<HookId::cuMemAllocManaged>(dptr, bytesize, caller,
                                                          /*count_plain=*/false, flags);
      });
  }
  return CallReal<HookId::cuMemAllocManaged>(dptr, bytesize, flags);
}

CUresult CUDAAPI cuMemGetInfo_v2(size_t* free, size_t* total) {
  HookScope scope;
  switch (scope.mode()) {
    case Mode::kPassThrough:
      break;
    case Mode::kSim:
      return DriverNoThrow([&] { return DriverResult(SimMemInfo(free, total)); });
    case Mode::kTier: {
      CUresult r = CallReal<HookId::cuMemGetInfo_v2>(free, total);
      if (r == CUDA_SUCCESS) AddOversubscription(free, total);
      return r;
    }
  }
  return CallReal<HookId::cuMemGetInfo_v2>(free, total);
}

CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  return MemAllocAsync<HookId::cuMemAllocAsync>(dptr, bytesize, hStream,
                                                __builtin_return_address(0));
}

CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  return MemAllocAsync<HookId::cuMemAllocAsync_ptsz>(dptr, bytesize, hStream,
                                                     __builtin_return_address(0));
}

CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
  return MemFreeAsync<HookId::cuMemFreeAsync>(dptr, hStream);
}

CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) {
  return MemFreeAsync<HookId::cuMemFreeAsync_ptsz>(dptr, hStream);
}

}  // extern "C"
