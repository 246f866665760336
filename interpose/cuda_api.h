// cuda_api.h: the one place the interposer includes the CUDA runtime and
// driver headers.
//
// The hooks must define the plain symbol names an application links against
// (cudaMemcpy, not cudaMemcpy_ptds), so the per-thread-default-stream macros
// that rename them are switched off here; the _ptsz/_ptds variants get rows
// of their own in hooks.def. The header is included with default visibility
// so that every hook we define from its declarations is exported; the linker
// version script (exports.map) keeps everything else local.
// Requires the CUDA toolkit headers (KVTIER_HAVE_CUDA); without them
// libkvtier.so builds with no CUDA hooks (see CMakeLists.txt).
// Thread-safety: declarations only.
#pragma once

#ifdef CUDA_API_PER_THREAD_DEFAULT_STREAM
#error \
    "build the interposer without CUDA_API_PER_THREAD_DEFAULT_STREAM: it must define the plain symbol names"
#endif

#pragma GCC visibility push(default)
#include <cuda.h>
#include <cuda_runtime_api.h>
#pragma GCC visibility pop

// cuda.h renames cuGetProcAddress to cuGetProcAddress_v2 for callers; the
// interposer defines both real symbols (a program or runtime built before
// CUDA 12 asks libcuda for the four-argument cuGetProcAddress by name), so
// the name must stay itself here. The other renames (cuMemAlloc ->
// cuMemAlloc_v2, ...) are harmless: hooks.def spells the _v2 names.
#undef cuGetProcAddress

#if CUDART_VERSION < 13000
#error \
    "the interposer's hook table follows the CUDA 13 runtime API (cudaMemPrefetchAsync and cudaMemAdvise take cudaMemLocation)"
#endif

#include <cstring>
#include <type_traits>

#define KVTIER_EXPORT __attribute__((visibility("default")))

namespace kvtier::interpose {

// The integer a program passed where the API declares an enum. A program may
// pass any value (a newer enumerator, garbage); reading it as the enum type
// is undefined behaviour when it lies outside the enum's range, so hooks copy
// the bytes out and validate the integer.
template <typename E>
int RawEnum(const E& e) {
  static_assert(std::is_enum_v<E> && sizeof(E) == sizeof(int));
  int v;
  std::memcpy(&v, &e, sizeof v);
  return v;
}

}  // namespace kvtier::interpose
