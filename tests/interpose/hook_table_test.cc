// The hook table (interpose/hooks.def) against the CUDA runtime that ships
// with the toolkit: every row names a symbol libcudart.so.13 exports (with
// the version the row claims), names are unique, and the enum, names and
// pointer types agree.
#include "interpose/hook_table.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <set>
#include <string>

namespace kvtier::interpose {
namespace {

TEST(InterposeHookTable, NamesAreUniqueAndMatchTheEnum) {
  std::set<std::string> names;
  for (int i = 0; i < kHookCount; ++i) {
    ASSERT_NE(kHooks[i].name, nullptr);
    EXPECT_TRUE(names.insert(kHooks[i].name).second) << "duplicate row " << kHooks[i].name;
  }
  EXPECT_STREQ(HookName(HookId::cudaMalloc), "cudaMalloc");
  EXPECT_STREQ(HookName(HookId::cudaMemPrefetchAsync_ptsz), "cudaMemPrefetchAsync_ptsz");
  EXPECT_TRUE(kHooks[static_cast<int>(HookId::cudaMemAdvise)].cuda13_abi);
  EXPECT_FALSE(kHooks[static_cast<int>(HookId::cudaMalloc)].cuda13_abi);
  static_assert(std::is_same_v<fn::cudaMemcpy_ptds, fn::cudaMemcpy>);
  static_assert(std::is_same_v<HookTraits<HookId::cudaFree>::Fn, cudaError_t (*)(void*)>);
}

TEST(InterposeHookTable, EveryRowExistsInLibcudart13) {
  void* cudart = dlopen("libcudart.so.13", RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(cudart, nullptr) << dlerror();
  for (int i = 0; i < kHookCount; ++i) {
    const HookInfo& h = kHooks[i];
    EXPECT_NE(dlvsym(cudart, h.name, "libcudart.so.13"), nullptr)
        << h.name << " is not exported as " << h.name << "@libcudart.so.13";
  }
  dlclose(cudart);
}

TEST(InterposeHookTable, ResolvesTheRealFunctionsOfALoadedRuntime) {
  // This test binary links libcudart (the direct call keeps it a dependency
  // under --as-needed), so each row resolves to its definition there (never
  // to a hook: this binary defines none).
  int version = 0;
  ASSERT_EQ(cudaRuntimeGetVersion(&version), cudaSuccess);
  void* cudart = dlopen("libcudart.so.13", RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(cudart, nullptr);
  for (int i = 0; i < kHookCount; ++i) {
    void* real = ResolveReal(static_cast<HookId>(i));
    ASSERT_NE(real, nullptr) << kHooks[i].name;
    Dl_info info{};
    ASSERT_TRUE(dladdr(real, &info));
    EXPECT_NE(strstr(info.dli_fname, "libcudart.so"), nullptr)
        << kHooks[i].name << " -> " << info.dli_fname;
  }
  dlclose(cudart);
}

TEST(InterposeHookTable, CallRealPassesArgumentsAndResults) {
  // No driver is needed for these two: they only read libcudart's tables.
  EXPECT_STREQ(CallReal<HookId::cudaGetErrorName>(cudaErrorInvalidValue), "cudaErrorInvalidValue");
  EXPECT_STREQ(CallReal<HookId::cudaGetErrorString>(cudaErrorMemoryAllocation), "out of memory");
}

}  // namespace
}  // namespace kvtier::interpose
