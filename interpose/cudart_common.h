// CudartCommon: state and helpers shared by the CUDA runtime API hooks.
//
// The simulated GPU and the plain-allocation table of a real-GPU process are
// process singletons created on first use and never destroyed (hooks may run
// from atexit handlers and static destructors). Fork handlers keep their
// mutexes usable in a child. Thread-safety: any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>

#include "interpose/cuda_api.h"
#include "interpose/plain_allocations.h"
#include "interpose/sim_cudart.h"
#include "runtime/clock.h"  // MonotonicNs, for event times
#include "runtime/runtime.h"

namespace kvtier::interpose {

// The simulated device (KVTIER_BACKEND=sim), from KVTIER_SIM_DEVICE_NAME and
// KVTIER_SIM_DEVICE_MEMORY.
SimCudaRuntime& TheSimCudaRuntime();
// Plain allocations made through the real cudaMalloc in kTier mode.
PlainAllocations& RealPlainAllocations();

// The tiered region that holds all of [p, p+n), or null.
RegionPtr RegionCovering(Runtime* rt, const void* p, size_t n);
// Device memory promised to tiered regions: min(region bytes, device budget).
uint64_t RegionDeviceReserve(Runtime* rt);
// What KVTIER_OVERSUBSCRIBE adds to the free and total memory reported:
// oversubscribe x (host budget + disk budget); 0 without a runtime.
uint64_t OversubscribedBytes(Runtime* rt);
// True when [p, p+n) is simulated device memory (plain or tiered).
bool SimDeviceRange(Runtime* rt, const void* p, size_t n);

// Runs a hook body that may allocate (maps, the runtime) so that no C++
// exception crosses into the program: out of memory becomes
// cudaErrorMemoryAllocation, anything else cudaErrorUnknown with one warning.
void WarnInternalError(const char* what);
template <typename F>
cudaError_t NoThrow(F&& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return cudaErrorMemoryAllocation;
  } catch (const std::exception& e) {
    WarnInternalError(e.what());
  } catch (...) {
    WarnInternalError("unknown exception");
  }
  return cudaErrorUnknown;
}

}  // namespace kvtier::interpose
