// CUDA runtime memory hooks: allocation, free, memory info, copies, fills and
// unified-memory hints.
//
// cudaMalloc asks the runtime whether the allocation becomes a tiered region
// (KVTIER_MATCH); the rest is plain device memory: simulated on the sim
// backend, the real cudaMalloc on a GPU. On the simulated GPU every pointer is
// host-addressable, so copies and fills are memmove/memset after checking that
// the device side lies inside one allocation (as libcudart would); a touch of
// a tiered page that is not resident faults it back transparently.
// cudaMemPrefetchAsync on a tiered region becomes a runtime hint (to the
// device: will-need; to the host: cold), and cudaMemAdvise on one is accepted
// and ignored. The stream-ordered and managed allocations are in
// cudart_alloc.cc. Thread-safety: any thread.
#include <cstring>

#include "interpose/alloc_paths.h"
#include "interpose/cudart_common.h"
#include "interpose/cudart_errors.h"
#include "interpose/hook_table.h"
#include "interpose/preload.h"
#include "runtime/log.h"
#include "start/process.h"

using kvtier::ProcessRuntime;
using kvtier::RegionPtr;
using kvtier::Runtime;
using kvtier::SignalKind;
using namespace kvtier::interpose;

namespace {

cudaError_t SimCopy(void* dst, const void* src, size_t count, int kind) {  // kind: a cudaMemcpyKind
  if (count == 0) return cudaSuccess;
  if (dst == nullptr || src == nullptr) return cudaErrorInvalidValue;
  Runtime* rt = ProcessRuntime();
  bool dst_device = false, src_device = false;
  switch (kind) {
    case cudaMemcpyHostToHost:
      break;
    case cudaMemcpyHostToDevice:
      dst_device = true;
      break;
    case cudaMemcpyDeviceToHost:
      src_device = true;
      break;
    case cudaMemcpyDeviceToDevice:
      dst_device = src_device = true;
      break;
    case cudaMemcpyDefault:
      break;  // unified addressing: any pointer
    default:
      return cudaErrorInvalidMemcpyDirection;
  }
  if ((dst_device && !SimDeviceRange(rt, dst, count)) ||
      (src_device && !SimDeviceRange(rt, src, count))) {
    return cudaErrorInvalidValue;
  }
  memmove(dst, src, count);
  return cudaSuccess;
}

cudaError_t SimFill(void* ptr, int value, size_t count) {
  if (count == 0) return cudaSuccess;
  if (!SimDeviceRange(ProcessRuntime(), ptr, count)) return cudaErrorInvalidValue;
  memset(ptr, value, count);
  return cudaSuccess;
}

// Prefetch/advise validation shared by the sim and tier paths: the device
// must be ordinal 0 (the only simulated one), the range a tiered region.
cudaError_t SimPrefetch(const void* ptr, size_t count, cudaMemLocation loc, unsigned flags,
                        cudaStream_t stream) {
  if (flags != 0) return cudaErrorInvalidValue;
  if (!TheSimCudaRuntime().ValidStream(stream)) return cudaErrorInvalidResourceHandle;
  SignalKind kind;
  switch (RawEnum(loc.type)) {
    case cudaMemLocationTypeDevice:
      if (loc.id != 0) return cudaErrorInvalidDevice;
      kind = SignalKind::kWillNeed;
      break;
    case cudaMemLocationTypeHost:
    case cudaMemLocationTypeHostNuma:
    case cudaMemLocationTypeHostNumaCurrent:
      kind = SignalKind::kCold;
      break;
    default:
      return cudaErrorInvalidValue;
  }
  if (count == 0) return cudaSuccess;
  Runtime* rt = ProcessRuntime();
  // Plain device memory is not managed memory: libcudart refuses it too.
  if (RegionCovering(rt, ptr, count) == nullptr) return cudaErrorInvalidValue;
  return rt->Hint(ptr, count, kind).ok() ? cudaSuccess : cudaErrorInvalidValue;
}

cudaError_t SimAdvise(const void* ptr, size_t count, int advice,
                      cudaMemLocation loc) {  // advice: a cudaMemoryAdvise
  if (advice < cudaMemAdviseSetReadMostly || advice > cudaMemAdviseUnsetAccessedBy)
    return cudaErrorInvalidValue;
  if (RawEnum(loc.type) == cudaMemLocationTypeDevice && loc.id != 0) return cudaErrorInvalidDevice;
  if (count == 0) return cudaSuccess;
  // Accepted and ignored on tiered regions: kvtier's policy owns placement.
  return RegionCovering(ProcessRuntime(), ptr, count) ? cudaSuccess : cudaErrorInvalidValue;
}

cudaError_t TierMalloc(void** devPtr, size_t size, const void* caller) {
  Runtime* rt = ProcessRuntime();
  if (devPtr != nullptr && TryRegion(rt, size, "cudaMalloc", caller, devPtr)) return cudaSuccess;
  cudaError_t err = CallReal<HookId::cudaMalloc>(devPtr, size);
  if (err == cudaSuccess && devPtr != nullptr) TrackPlain(rt, *devPtr, size);
  return err;
}

cudaError_t TierFree(void* devPtr) {
  Runtime* rt = ProcessRuntime();
  if (FreeRegion(rt, devPtr)) return cudaSuccess;
  UntrackPlain(rt, devPtr);
  // The real cudaFree decides about pointers kvtier never saw (and does
  // context set-up for cudaFree(nullptr)).
  return CallReal<HookId::cudaFree>(devPtr);
}

// A prefetch on a real GPU: of a tiered region, a hint only (the runtime's
// policy and mover own placement within the device budget); of anything
// else, the real call.
template <HookId id>
cudaError_t TierPrefetch(const void* ptr, size_t count, cudaMemLocation loc, unsigned flags,
                         cudaStream_t stream) {
  Runtime* rt = ProcessRuntime();
  if (count != 0 && RegionCovering(rt, ptr, count) != nullptr) {
    SignalKind kind =
        RawEnum(loc.type) == cudaMemLocationTypeDevice ? SignalKind::kWillNeed : SignalKind::kCold;
    return rt->Hint(ptr, count, kind).ok() ? cudaSuccess : cudaErrorInvalidValue;
  }
  return CallReal<id>(ptr, count, loc, flags, stream);
}

// One body for a copy hook and its per-thread-stream twin: `stream...` is
// empty for the synchronous forms; an async form checks its stream first.
template <HookId id, typename... Stream>
cudaError_t Copy(void* dst, const void* src, size_t count, cudaMemcpyKind kind, Stream... stream) {
  HookScope scope;
  if (scope.mode() != Mode::kSim) return CallReal<id>(dst, src, count, kind, stream...);
  if constexpr (sizeof...(Stream) > 0) {
    if (!TheSimCudaRuntime().ValidStream(stream...))
      return SimResult(cudaErrorInvalidResourceHandle);
  }
  return SimResult(SimCopy(dst, src, count, RawEnum(kind)));
}

// The same for the fill hooks.
template <HookId id, typename... Stream>
cudaError_t Fill(void* devPtr, int value, size_t count, Stream... stream) {
  HookScope scope;
  if (scope.mode() != Mode::kSim) return CallReal<id>(devPtr, value, count, stream...);
  if constexpr (sizeof...(Stream) > 0) {
    if (!TheSimCudaRuntime().ValidStream(stream...))
      return SimResult(cudaErrorInvalidResourceHandle);
  }
  return SimResult(SimFill(devPtr, value, count));
}

}  // namespace

extern "C" {

cudaError_t cudaMalloc(void** devPtr, size_t size) {
  HookScope scope;
  const void* caller = __builtin_return_address(0);
  switch (scope.mode()) {
    case Mode::kPassThrough:
      break;
    case Mode::kSim:
      return SimResult(NoThrow([&] { return SimAllocate(devPtr, size, "cudaMalloc", caller); }));
    case Mode::kTier:
      return NoThrow([&] { return TierMalloc(devPtr, size, caller); });
  }
  return CallReal<HookId::cudaMalloc>(devPtr, size);
}

cudaError_t cudaFree(void* devPtr) {
  HookScope scope;
  switch (scope.mode()) {
    case Mode::kPassThrough:
      break;
    case Mode::kSim:
      return SimResult(NoThrow([&] { return SimRelease(devPtr, "cudaFree"); }));
    case Mode::kTier:
      return NoThrow([&] { return TierFree(devPtr); });
  }
  return CallReal<HookId::cudaFree>(devPtr);
}

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  HookScope scope;
  switch (scope.mode()) {
    case Mode::kPassThrough:
      break;
    case Mode::kSim:
      return SimResult(NoThrow([&] { return SimMemInfo(free, total); }));
    case Mode::kTier: {
      cudaError_t err = CallReal<HookId::cudaMemGetInfo>(free, total);
      if (err == cudaSuccess) AddOversubscription(free, total);
      return err;
    }
  }
  return CallReal<HookId::cudaMemGetInfo>(free, total);
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind) {
  return Copy<HookId::cudaMemcpy>(dst, src, count, kind);
}

cudaError_t cudaMemcpy_ptds(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind) {
  return Copy<HookId::cudaMemcpy_ptds>(dst, src, count, kind);
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t stream) {
  return Copy<HookId::cudaMemcpyAsync>(dst, src, count, kind, stream);
}

cudaError_t cudaMemcpyAsync_ptsz(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind,
                                 cudaStream_t stream) {
  return Copy<HookId::cudaMemcpyAsync_ptsz>(dst, src, count, kind, stream);
}

cudaError_t cudaMemset(void* devPtr, int value, size_t count) {
  return Fill<HookId::cudaMemset>(devPtr, value, count);
}

cudaError_t cudaMemset_ptds(void* devPtr, int value, size_t count) {
  return Fill<HookId::cudaMemset_ptds>(devPtr, value, count);
}

cudaError_t cudaMemsetAsync(void* devPtr, int value, size_t count, cudaStream_t stream) {
  return Fill<HookId::cudaMemsetAsync>(devPtr, value, count, stream);
}

cudaError_t cudaMemsetAsync_ptsz(void* devPtr, int value, size_t count, cudaStream_t stream) {
  return Fill<HookId::cudaMemsetAsync_ptsz>(devPtr, value, count, stream);
}

cudaError_t cudaMemPrefetchAsync(const void* devPtr, size_t count, struct cudaMemLocation location,
                                 unsigned int flags, cudaStream_t stream) {
  HookScope scope;
  switch (scope.mode()) {
    case Mode::kPassThrough:
      break;
    case Mode::kSim:
      return SimResult(
          NoThrow([&] { return SimPrefetch(devPtr, count, location, flags, stream); }));
    case Mode::kTier:
      return NoThrow([&] {
        return TierPrefetch<HookId::cudaMemPrefetchAsync>(devPtr, count, location, flags, stream);
      });
  }
  return CallReal<HookId::cudaMemPrefetchAsync>(devPtr, count, location, flags, stream);
}

cudaError_t cudaMemPrefetchAsync_ptsz(const void* devPtr, size_t count,
                                      struct cudaMemLocation location, unsigned int flags,
                                      cudaStream_t stream) {
  HookScope scope;
  switch (scope.mode()) {
    case Mode::kPassThrough:
      break;
    case Mode::kSim:
      return SimResult(
          NoThrow([&] { return SimPrefetch(devPtr, count, location, flags, stream); }));
    case Mode::kTier:
      return NoThrow([&] {
        return TierPrefetch<HookId::cudaMemPrefetchAsync_ptsz>(devPtr, count, location, flags,
                                                               stream);
      });
  }
  return CallReal<HookId::cudaMemPrefetchAsync_ptsz>(devPtr, count, location, flags, stream);
}

cudaError_t cudaMemAdvise(const void* devPtr, size_t count, enum cudaMemoryAdvise advice,
                          struct cudaMemLocation location) {
  HookScope scope;
  const Mode mode = scope.mode();
  if (mode == Mode::kTier && count != 0 && RegionCovering(ProcessRuntime(), devPtr, count)) {
    return cudaSuccess;  // accepted and ignored: kvtier's policy owns placement
  }
  if (mode != Mode::kSim) return CallReal<HookId::cudaMemAdvise>(devPtr, count, advice, location);
  const int raw_advice = RawEnum(advice);
  return SimResult(NoThrow([&] { return SimAdvise(devPtr, count, raw_advice, location); }));
}

}  // extern "C"
