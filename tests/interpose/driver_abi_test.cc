// The driver rows of interpose/hooks.def against cuda.h's own declarations.
//
// hook_table.h checks the plain driver rows against the public cuda.h at
// compile time. The per-thread (_ptsz) variants and the four-argument
// cuGetProcAddress are not declared there; cuda.h declares them, with their
// real signatures, only when __CUDA_API_VERSION_INTERNAL is set (the
// driver's own build). This file sets it and checks every driver row, so a
// row that disagrees with the driver's declaration does not compile.
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <gtest/gtest.h>

#include <cstring>
#include <type_traits>

namespace {

#define KVTIER_DRIVER_HOOK(proc, since, name, params)                         \
  static_assert(std::is_same_v<decltype(&::name), CUresult(CUDAAPI*) params>, \
                #name ": the hooks.def row disagrees with cuda.h");
#define KVTIER_DRIVER_PT_HOOK(proc, since, name, plain)                \
  static_assert(std::is_same_v<decltype(&::name), decltype(&::plain)>, \
                #name ": the per-thread variant's signature differs from " #plain);
#include "interpose/hooks.def"

struct Row {
  const char* proc;
  int since;
  const char* name;
};
constexpr Row kRows[] = {
#define KVTIER_DRIVER_HOOK(proc, since, name, params) {#proc, since, #name},
#define KVTIER_DRIVER_PT_HOOK(proc, since, name, plain) {#proc, since, #name},
#include "interpose/hooks.def"
};

TEST(InterposeDriverAbi, EveryDriverRowNamesAVariantOfItsProcName) {
  for (const Row& r : kRows) {
    // cuMemAlloc_v2 is a variant of cuMemAlloc, cuLaunchKernel_ptsz of cuLaunchKernel.
    EXPECT_EQ(strncmp(r.name, r.proc, strlen(r.proc)), 0) << r.name << " vs " << r.proc;
    EXPECT_GE(r.since, 2000) << r.name;
    EXPECT_LE(r.since, CUDA_VERSION) << r.name;
  }
}

}  // namespace
