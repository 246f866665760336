// DriverEntry: the rule (driver_entry.h) and the hooks that hand out driver
// entry points: cuGetProcAddress, cuGetProcAddress_v2,
// cudaGetDriverEntryPoint and cudaGetDriverEntryPointByVersion (and _ptsz).
//
// These hooks never decide the process mode: the CUDA runtime asks for its
// entry points while it initialises, and starting kvtier's backend from there
// would call into the driver from inside the runtime's initialisation. The
// wrappers decide the mode when they are first called. Thread-safety: any
// thread.
#include "interpose/driver_entry.h"

#include <cstring>

#include "interpose/hook_table.h"
#include "interpose/preload.h"
#include "runtime/log.h"

using namespace kvtier::interpose;

namespace kvtier::interpose {
namespace {

// The newest cudaVersion the name rule trusts: requests up to the end of the
// CUDA major release the table follows.
constexpr int kNewestKnownVersion = CUDA_VERSION / 1000 * 1000 + 999;

bool IsDriverRow(int i) { return kHooks[i].library == Library::kDriver; }

// The row the driver hands back for (symbol, version, flags), or kNoHook.
HookId RowByName(const char* symbol, int version, uint64_t flags) {
  if (version > kNewestKnownVersion) return kNoHook;
  bool has_per_thread = false;
  for (int i = 0; i < kHookCount; ++i) {
    if (IsDriverRow(i) && kHooks[i].per_thread && strcmp(kHooks[i].proc, symbol) == 0)
      has_per_thread = true;
  }
  const bool per_thread =
      has_per_thread && (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  HookId best = kNoHook;
  int best_since = -1;
  for (int i = 0; i < kHookCount; ++i) {
    const HookInfo& h = kHooks[i];
    if (!IsDriverRow(i) || h.per_thread != per_thread || strcmp(h.proc, symbol) != 0) continue;
    if (h.since <= version && h.since > best_since) {
      best = static_cast<HookId>(i);
      best_since = h.since;
    }
  }
  return best;
}

}  // namespace

void* WrapperForSymbol(const char* name, void* real) {
  if (real == nullptr || name == nullptr || name[0] != 'c' || name[1] != 'u') return real;
  HookId id = FindHook(name);
  if (id == kNoHook || Hook(id).library != Library::kDriver) return real;
  SeedReal(id, real);
  return ResolveReal(id) == real ? HookAddress(id) : real;
}

void* WrapperForProc(const char* symbol, void* real, int cuda_version, uint64_t flags) {
  if (real == nullptr || symbol == nullptr) return real;
  for (int i = 0; i < kHookCount; ++i) {
    if (HookAddress(static_cast<HookId>(i)) == real) return real;  // one of ours already
  }
  // Identity: the rows asked for by this name.
  HookId id = kNoHook;
  for (int i = 0; i < kHookCount && id == kNoHook; ++i) {
    if (IsDriverRow(i) && strcmp(kHooks[i].proc, symbol) == 0 &&
        ResolveReal(static_cast<HookId>(i)) == real) {
      id = static_cast<HookId>(i);
    }
  }
  const char* how = "the same function";
  if (id == kNoHook) {
    id = RowByName(symbol, cuda_version, flags);
    if (id == kNoHook) return real;
    SeedReal(id, real);
    if (ResolveReal(id) == nullptr) return real;
    how = "by name and version";
  }
  Log(3, "driver entry point %s (CUDA %d, flags %llu): kvtier's %s (%s)", symbol, cuda_version,
      static_cast<unsigned long long>(flags), HookName(id), how);
  return HookAddress(id);
}

}  // namespace kvtier::interpose

namespace {

// cudaGetDriverEntryPoint[ByVersion]: the real call, then the rule.
template <HookId id, typename... Args>
cudaError_t EntryPoint(const char* symbol, void** funcPtr, int version, unsigned long long flags,
                       Args... args) {
  HookScope scope;
  cudaError_t err = CallReal<id>(symbol, funcPtr, args...);
  if (err == cudaSuccess && funcPtr != nullptr && *funcPtr != nullptr) {
    *funcPtr = WrapperForProc(symbol, *funcPtr, version, flags);
  }
  return err;
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion,
                                  cuuint64_t flags) {
  HookScope scope;
  CUresult r = CallReal<HookId::cuGetProcAddress>(symbol, pfn, cudaVersion, flags);
  if (r == CUDA_SUCCESS && pfn != nullptr) *pfn = WrapperForProc(symbol, *pfn, cudaVersion, flags);
  return r;
}

CUresult CUDAAPI cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion,
                                     cuuint64_t flags,
                                     CUdriverProcAddressQueryResult* symbolStatus) {
  HookScope scope;
  CUresult r = CallReal<HookId::cuGetProcAddress_v2>(symbol, pfn, cudaVersion, flags, symbolStatus);
  if (r == CUDA_SUCCESS && pfn != nullptr) *pfn = WrapperForProc(symbol, *pfn, cudaVersion, flags);
  return r;
}

// Without a version the runtime asks for its own (CUDART_VERSION); the
// table's release is the closest kvtier knows.
cudaError_t cudaGetDriverEntryPoint(const char* symbol, void** funcPtr, unsigned long long flags,
                                    enum cudaDriverEntryPointQueryResult* driverStatus) {
  return EntryPoint<HookId::cudaGetDriverEntryPoint>(symbol, funcPtr, CUDA_VERSION, flags, flags,
                                                     driverStatus);
}

cudaError_t cudaGetDriverEntryPoint_ptsz(const char* symbol, void** funcPtr,
                                         unsigned long long flags,
                                         enum cudaDriverEntryPointQueryResult* driverStatus) {
  return EntryPoint<HookId::cudaGetDriverEntryPoint_ptsz>(symbol, funcPtr, CUDA_VERSION, flags,
                                                          flags, driverStatus);
}

cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** funcPtr,
                                             unsigned int cudaVersion, unsigned long long flags,
                                             enum cudaDriverEntryPointQueryResult* driverStatus) {
  return EntryPoint<HookId::cudaGetDriverEntryPointByVersion>(
      symbol, funcPtr, static_cast<int>(cudaVersion), flags, cudaVersion, flags, driverStatus);
}

cudaError_t cudaGetDriverEntryPointByVersion_ptsz(
    const char* symbol, void** funcPtr, unsigned int cudaVersion, unsigned long long flags,
    enum cudaDriverEntryPointQueryResult* driverStatus) {
  return EntryPoint<HookId::cudaGetDriverEntryPointByVersion_ptsz>(
      symbol, funcPtr, static_cast<int>(cudaVersion), flags, cudaVersion, flags, driverStatus);
}

}  // extern "C"
