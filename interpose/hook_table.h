// HookTable: what hooks.def generates, and how a hook reaches the real
// function it wraps.
//
// From the one table: the HookId enum, the symbol names, the ABI of each row,
// and the function-pointer type of each hook (fn::cudaMalloc, ...). Real
// functions are resolved lazily, on the first call that needs them, with
// dlsym(RTLD_NEXT); a runtime loaded with RTLD_LOCAL (out of the global
// scope) is found through dlopen(RTLD_NOLOAD) of its soname. A real function
// that cannot be found is never called: CallReal returns the library's
// "not found" value (cudaErrorSymbolNotFound, the runtime's code for "named
// symbol not found") and warns once, naming the symbol.
// Thread-safety: resolution is idempotent and lock-free (racing threads store
// the same pointer); everything else is constant.
#pragma once

#include <type_traits>

#include "interpose/cuda_api.h"

namespace kvtier::interpose {

// The library a row's real function lives in (a later table adds kDriver).
enum class Library : unsigned char { kCudart };

enum class HookId : int {
#define KVTIER_CUDART_HOOK(abi, ret, name, params) name,
#define KVTIER_CUDART_PT_HOOK(abi, name, plain) name,
#include "interpose/hooks.def"
  kCount
};
constexpr int kHookCount = static_cast<int>(HookId::kCount);

struct HookInfo {
  const char* name;  // the exported symbol, e.g. "cudaMalloc"
  Library library;
  bool cuda13_abi;  // exported as name@@libcudart.so.13 (see hooks.def)
};
extern const HookInfo kHooks[kHookCount];
inline const char* HookName(HookId id) { return kHooks[static_cast<int>(id)].name; }

// fn::cudaMalloc is `cudaError_t (*)(void**, size_t)`, and so on. Plain rows
// first: a per-thread variant's type is its plain row's type.
namespace fn {
#define KVTIER_CUDART_HOOK(abi, ret, name, params) using name = ret(*) params;
#include "interpose/hooks.def"
#define KVTIER_CUDART_PT_HOOK(abi, name, plain) using name = plain;
#include "interpose/hooks.def"
}  // namespace fn

template <HookId id>
struct HookTraits;
#define KVTIER_CUDART_HOOK(abi, ret, name, params) \
  template <>                                      \
  struct HookTraits<HookId::name> {                \
    using Fn = fn::name;                           \
  };
#define KVTIER_CUDART_PT_HOOK(abi, name, plain) KVTIER_CUDART_HOOK(abi, void, name, ())
#include "interpose/hooks.def"

// The real function behind `id`, or nullptr when the process has none.
void* ResolveReal(HookId id);

// What a hook returns when its real function is missing.
template <typename R>
R MissingResult(HookId id);
template <>
cudaError_t MissingResult<cudaError_t>(HookId id);
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
// a compile error; the per-thread variants are declared from their type.
extern "C" {
#define KVTIER_CUDART_HOOK(abi, ret, name, params) KVTIER_EXPORT ret name params;
#define KVTIER_CUDART_PT_HOOK(abi, name, plain) \
  KVTIER_EXPORT std::remove_pointer_t<kvtier::interpose::fn::name> name;
#include "interpose/hooks.def"
}
