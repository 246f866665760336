// HookTable: names and lazy resolution of the real CUDA functions (see
// hook_table.h).
#include "interpose/hook_table.h"

#include <dlfcn.h>

#include <atomic>
#include <cstring>

#include "runtime/device/cuda/real_dl.h"
#include "runtime/log.h"

namespace kvtier::interpose {

const HookInfo kHooks[kHookCount] = {
#define KVTIER_CUDART_HOOK(abi, ret, name, params) \
  {#name, Library::kCudart, KVTIER_ABI_##abi, nullptr, 0, false},
#define KVTIER_CUDART_PT_HOOK(abi, name, plain) \
  {#name, Library::kCudart, KVTIER_ABI_##abi, nullptr, 0, false},
#define KVTIER_DRIVER_HOOK(proc, since, name, params) \
  {#name, Library::kDriver, false, #proc, since, false},
#define KVTIER_DRIVER_PT_HOOK(proc, since, name, plain) \
  {#name, Library::kDriver, false, #proc, since, true},
#define KVTIER_ABI_ANY false
#define KVTIER_ABI_CUDA13 true
#include "interpose/hooks.def"
#undef KVTIER_ABI_ANY
#undef KVTIER_ABI_CUDA13
};

namespace {

// Constant-initialised: usable before any constructor has run.
std::atomic<void*> g_real[kHookCount];
std::atomic<bool> g_missing_warned[kHookCount];

// Sonames tried when the library is loaded outside the global scope. Newest
// first: the runtime rows follow the CUDA 13 ABI.
constexpr const char* kCudartSonames[] = {"libcudart.so.13", "libcudart.so"};
constexpr const char* kDriverSonames[] = {"libcuda.so.1", "libcuda.so"};

bool IsOwnSymbol(void* p) {
  Dl_info mine{}, theirs{};
  if (!dladdr(reinterpret_cast<void*>(&ResolveReal), &mine)) return false;
  return dladdr(p, &theirs) && theirs.dli_fbase == mine.dli_fbase;
}

// The real dlsym throughout: kvtier's own dlsym would hand back kvtier's
// wrappers for the driver rows (dlsym_hook.cc).
void* FindInLoadedLibrary(const char* name, Library library, bool cuda13_abi) {
  for (const char* soname : library == Library::kCudart ? kCudartSonames : kDriverSonames) {
    // RTLD_NOLOAD: only a library the program already loaded; we never load
    // a CUDA library the program did not ask for.
    void* handle = dlopen(soname, RTLD_LAZY | RTLD_NOLOAD);
    if (handle == nullptr) continue;
    void* p = cuda13_abi ? dlvsym(handle, name, "libcudart.so.13") : cuda::RealDlsym(handle, name);
    dlclose(handle);  // drops the reference NOLOAD took; the library stays
    if (p != nullptr && !IsOwnSymbol(p)) return p;
  }
  return nullptr;
}

void* Lookup(const char* name, Library library, bool cuda13_abi) {
  // A CUDA 13 row must bind to the CUDA 13 definition, never to an older
  // runtime's symbol of the same name (different arguments).
  void* p =
      cuda13_abi ? dlvsym(RTLD_NEXT, name, "libcudart.so.13") : cuda::RealDlsym(RTLD_NEXT, name);
  if (p == nullptr || IsOwnSymbol(p)) p = FindInLoadedLibrary(name, library, cuda13_abi);
  return p;
}

}  // namespace

HookId FindHook(const char* name) {
  if (name == nullptr) return kNoHook;
  for (int i = 0; i < kHookCount; ++i) {
    if (strcmp(kHooks[i].name, name) == 0) return static_cast<HookId>(i);
  }
  return kNoHook;
}

void* ResolveReal(HookId id) {
  const int i = static_cast<int>(id);
  void* p = g_real[i].load(std::memory_order_acquire);
  if (p != nullptr) return p;
  const HookInfo& hook = kHooks[i];
  p = Lookup(hook.name, hook.library, hook.cuda13_abi);
  // Not found is not cached: the program may load the library later.
  if (p != nullptr) g_real[i].store(p, std::memory_order_release);
  return p;
}

void SeedReal(HookId id, void* real) {
  if (id == kNoHook || real == nullptr || IsOwnSymbol(real)) return;
  void* expected = nullptr;
  g_real[static_cast<int>(id)].compare_exchange_strong(expected, real, std::memory_order_acq_rel);
}

void* RealDriverSymbol(const char* name) { return Lookup(name, Library::kDriver, false); }

void* RealRuntimeSymbol(const char* name) { return Lookup(name, Library::kCudart, false); }

template <>
cudaError_t MissingResult<cudaError_t>(HookId id) {
  const int i = static_cast<int>(id);
  WarnOnce(&g_missing_warned[i],
           "%s: the process has no CUDA runtime that defines it (is libcudart.so.13 loaded?); "
           "returning cudaErrorSymbolNotFound",
           kHooks[i].name);
  return cudaErrorSymbolNotFound;
}

template <>
CUresult MissingResult<CUresult>(HookId id) {
  const int i = static_cast<int>(id);
  WarnOnce(&g_missing_warned[i],
           "%s: the process has no CUDA driver that defines it (is libcuda.so.1 loaded, and new "
           "enough?); returning CUDA_ERROR_NOT_FOUND",
           kHooks[i].name);
  return CUDA_ERROR_NOT_FOUND;
}

template <>
const char* MissingResult<const char*>(HookId id) {
  const int i = static_cast<int>(id);
  WarnOnce(&g_missing_warned[i], "%s: the process has no CUDA runtime that defines it",
           kHooks[i].name);
  return "unrecognized error code";
}

}  // namespace kvtier::interpose
