// HookTable: names and lazy resolution of the real CUDA functions (see
// hook_table.h).
#include "interpose/hook_table.h"

#include <dlfcn.h>

#include <atomic>

#include "runtime/log.h"

namespace kvtier::interpose {

const HookInfo kHooks[kHookCount] = {
#define KVTIER_CUDART_HOOK(abi, ret, name, params) {#name, Library::kCudart, KVTIER_ABI_##abi},
#define KVTIER_CUDART_PT_HOOK(abi, name, plain) {#name, Library::kCudart, KVTIER_ABI_##abi},
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

// Sonames tried when the runtime is loaded outside the global scope. Newest
// first: the table follows the CUDA 13 ABI.
constexpr const char* kCudartSonames[] = {"libcudart.so.13", "libcudart.so"};

bool IsOwnSymbol(void* p) {
  Dl_info mine{}, theirs{};
  if (!dladdr(reinterpret_cast<void*>(&ResolveReal), &mine)) return false;
  return dladdr(p, &theirs) && theirs.dli_fbase == mine.dli_fbase;
}

void* FindInLoadedLibrary(const HookInfo& hook) {
  for (const char* soname : kCudartSonames) {
    // RTLD_NOLOAD: only a library the program already loaded; we never load
    // a CUDA runtime the program did not ask for.
    void* handle = dlopen(soname, RTLD_LAZY | RTLD_NOLOAD);
    if (handle == nullptr) continue;
    void* p =
        hook.cuda13_abi ? dlvsym(handle, hook.name, "libcudart.so.13") : dlsym(handle, hook.name);
    dlclose(handle);  // drops the reference NOLOAD took; the library stays
    if (p != nullptr && !IsOwnSymbol(p)) return p;
  }
  return nullptr;
}

}  // namespace

void* ResolveReal(HookId id) {
  const int i = static_cast<int>(id);
  void* p = g_real[i].load(std::memory_order_acquire);
  if (p != nullptr) return p;
  const HookInfo& hook = kHooks[i];
  // A CUDA 13 row must bind to the CUDA 13 definition, never to an older
  // runtime's symbol of the same name (different arguments).
  p = hook.cuda13_abi ? dlvsym(RTLD_NEXT, hook.name, "libcudart.so.13")
                      : dlsym(RTLD_NEXT, hook.name);
  if (p == nullptr || IsOwnSymbol(p)) p = FindInLoadedLibrary(hook);
  // Not found is not cached: the program may load the runtime later.
  if (p != nullptr) g_real[i].store(p, std::memory_order_release);
  return p;
}

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
const char* MissingResult<const char*>(HookId id) {
  const int i = static_cast<int>(id);
  WarnOnce(&g_missing_warned[i], "%s: the process has no CUDA runtime that defines it",
           kHooks[i].name);
  return "unrecognized error code";
}

}  // namespace kvtier::interpose
