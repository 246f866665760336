// HookTable: what hooks.def generates, and how a hook reaches the real
// function it wraps.
//
// From the one table: the HookId enum, the symbol names, the library and ABI
// of each row, the cuGetProcAddress name and version of each driver row, the
// function-pointer type of each hook (fn::cudaMalloc, fn::cuMemAlloc_v2, ...)
// and the address of kvtier's own definition (HookAddress). Real functions
// are resolved lazily, on the first call that needs them, with libc's own
// dlsym (runtime/device/cuda/real_dl.h; kvtier's dlsym would hand back its
// own wrappers, dlsym_hook.cc) and RTLD_NEXT; a library loaded outside the global
// scope (libcudart with RTLD_LOCAL, libcuda.so.1 as libcudart opens it) is
// found through dlopen(RTLD_NOLOAD) of its soname. A real function that
// cannot be found is never called: CallReal returns the library's "not
// found" value (cudaErrorSymbolNotFound; CUDA_ERROR_NOT_FOUND for the driver)
// and warns once, naming the symbol.
// Thread-safety: resolution is idempotent and lock-free (racing threads store
// the same pointer); everything else is constant.
#pragma once

#include <type_traits>

#include "interpose/cuda_api.h"

namespace kvtier::interpose {

// The library a row's real function lives in.
enum class Library : unsigned char { kCudart, kDriver };

enum class HookId : int {
#define KVTIER_CUDART_HOOK(abi, ret, name, params) name,
#define KVTIER_CUDART_PT_HOOK(abi, name, plain) name,
#define KVTIER_DRIVER_HOOK(proc, since, name, params) name,
#define KVTIER_DRIVER_PT_HOOK(proc, since, name, plain) name,
#include "interpose/hooks.def"
  kCount
};
constexpr int kHookCount = static_cast<int>(HookId::kCount);
constexpr HookId kNoHook = HookId::kCount;

struct HookInfo {
  const char* name;  // the exported symbol, e.g. "cudaMalloc", "cuMemAlloc_v2"
  Library library;
  bool cuda13_abi;  // exported as name@@libcudart.so.13 (see hooks.def)
  // Driver rows: the name cuGetProcAddress is asked for, the lowest
  // cudaVersion that gets this variant, and whether it is the per-thread
  // default stream variant. Runtime rows: nullptr, 0, false.
  const char* proc;
  int since;
  bool per_thread;
};
extern const HookInfo kHooks[kHookCount];
inline const HookInfo& Hook(HookId id) { return kHooks[static_cast<int>(id)]; }
inline const char* HookName(HookId id) { return Hook(id).name; }

// The row exported as `name`, or kNoHook.
HookId FindHook(const char* name);
// kvtier's own definition of the row (what a program gets instead of the
// real function).
void* HookAddress(HookId id);

// fn::cudaMalloc is `cudaError_t (*)(void**, size_t)`, and so on. Plain rows
// first: a per-thread variant's type is its plain row's type.
namespace fn {
#define KVTIER_CUDART_HOOK(abi, ret, name, params) using name = ret(*) params;
#define KVTIER_DRIVER_HOOK(proc, since, name, params) using name = CUresult(*) params;
#include "interpose/hooks.def"
#define KVTIER_CUDART_PT_HOOK(abi, name, plain) using name = plain;
#define KVTIER_DRIVER_PT_HOOK(proc, since, name, plain) using name = plain;
#include "interpose/hooks.def"
}  // namespace fn

template <HookId id>
struct HookTraits;
#define KVTIER_HOOK_TRAITS_(name)   \
  template <>                       \
  struct HookTraits<HookId::name> { \
    using Fn = fn::name;            \
  };
#define KVTIER_CUDART_HOOK(abi, ret, name, params) KVTIER_HOOK_TRAITS_(name)
#define KVTIER_CUDART_PT_HOOK(abi, name, plain) KVTIER_HOOK_TRAITS_(name)
#define KVTIER_DRIVER_HOOK(proc, since, name, params) KVTIER_HOOK_TRAITS_(name)
#define KVTIER_DRIVER_PT_HOOK(proc, since, name, plain) KVTIER_HOOK_TRAITS_(name)
#include "interpose/hooks.def"
#undef KVTIER_HOOK_TRAITS_

// The real function behind `id`, or nullptr when the process has none.
void* ResolveReal(HookId id);
// Records `real` as the real function behind `id` unless one is known
// already (the dlsym hook sees libcuda's pointers before any call needs
// them). `real` must be the other library's, never kvtier's own.
void SeedReal(HookId id, void* real);
// A driver function kvtier calls itself but does not hook
// (cuFuncGetParamInfo, ...), resolved like a driver row; nullptr if absent.
void* RealDriverSymbol(const char* name);
// The same for a CUDA runtime function with the same ABI in 12 and 13
// (cudaGetFuncBySymbol, ...).
void* RealRuntimeSymbol(const char* name);

// What a hook returns when its real function is missing.
template <typename R>
R MissingResult(HookId id);
template <>
cudaError_t MissingResult<cudaError_t>(HookId id);
template <>
CUresult MissingResult<CUresult>(HookId id);
template <>
const char* MissingResult<const char*>(HookId id);

// Calls the real function, or returns MissingResult when there is none.
template <HookId id, typename... Args>
auto CallReal(Args... args) {
  using Fn = typename HookTraits<id>::Fn;
  using R = std::invoke_result_t<Fn, Args...>;
  auto real = reinterpret_cast<Fn>(ResolveReal(id));
  if (real == nullptr) return MissingResult<R>(id);
  return real(args...);
}

}  // namespace kvtier::interpose

// Declarations of the exported hooks. For the plain rows this repeats the CUDA
// header's declaration, so a row whose signature disagrees with the header is
// a compile error; the per-thread variants are declared from their type, and
// so is the four-argument cuGetProcAddress (cuda.h declares it only for the
// driver's own build; driver_abi_test.cc checks it against that declaration).
extern "C" {
#define KVTIER_CUDART_HOOK(abi, ret, name, params) KVTIER_EXPORT ret name params;
#define KVTIER_CUDART_PT_HOOK(abi, name, plain) \
  KVTIER_EXPORT std::remove_pointer_t<kvtier::interpose::fn::name> name;
#define KVTIER_DRIVER_HOOK(proc, since, name, params) KVTIER_EXPORT CUresult CUDAAPI name params;
#define KVTIER_DRIVER_PT_HOOK(proc, since, name, plain) \
  KVTIER_EXPORT std::remove_pointer_t<kvtier::interpose::fn::name> name;
#include "interpose/hooks.def"
}
