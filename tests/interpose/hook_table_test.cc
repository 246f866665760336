// The hook table (interpose/hooks.def) against the CUDA runtime and the
// driver stub that ship with the toolkit: every runtime row names a symbol
// libcudart.so.13 exports (with the version the row claims), every driver row
// one the driver exports, names are unique, and the enum, names, libraries,
// cuGetProcAddress names and pointer types agree.
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
  static_assert(std::is_same_v<fn::cuLaunchKernel_ptsz, fn::cuLaunchKernel>);
  static_assert(
      std::is_same_v<HookTraits<HookId::cuMemAlloc_v2>::Fn, CUresult (*)(CUdeviceptr*, size_t)>);
  EXPECT_EQ(FindHook("cuMemAlloc_v2"), HookId::cuMemAlloc_v2);
  EXPECT_EQ(FindHook("cudaMallocAsync_ptsz"), HookId::cudaMallocAsync_ptsz);
  EXPECT_EQ(FindHook("cuMemAlloc"), kNoHook);  // the v1 ABI is not hooked
  EXPECT_EQ(FindHook(nullptr), kNoHook);
}

TEST(InterposeHookTable, DriverRowsCarryTheirProcNameAndVariant) {
  int driver_rows = 0;
  for (int i = 0; i < kHookCount; ++i) {
    const HookInfo& h = kHooks[i];
    const bool ptsz = strstr(h.name, "_ptsz") != nullptr || strstr(h.name, "_ptds") != nullptr;
    if (h.library == Library::kCudart) {
      EXPECT_EQ(h.proc, nullptr) << h.name;
      EXPECT_EQ(strncmp(h.name, "cuda", 4), 0) << h.name;
      continue;
    }
    ++driver_rows;
    ASSERT_NE(h.proc, nullptr) << h.name;
    EXPECT_EQ(strncmp(h.name, "cu", 2), 0) << h.name;
    EXPECT_NE(strncmp(h.name, "cuda", 4), 0) << h.name;
    EXPECT_FALSE(h.cuda13_abi) << h.name << ": libcuda has no symbol versions";
    EXPECT_EQ(h.per_thread, ptsz) << h.name;
    EXPECT_GT(h.since, 0) << h.name;
  }
  EXPECT_GE(driver_rows, 14);
  EXPECT_STREQ(Hook(HookId::cuMemAlloc_v2).proc, "cuMemAlloc");
  EXPECT_EQ(Hook(HookId::cuGetProcAddress_v2).since, 12000);
  EXPECT_TRUE(Hook(HookId::cuLaunchKernel_ptsz).per_thread);
}

TEST(InterposeHookTable, EveryDriverRowExistsInTheDriver) {
  // The toolkit's link stub exports every driver entry point (unversioned,
  // as libcuda.so.1 does); its functions are never called here.
  void* stub = dlopen(KVTIER_CUDA_DRIVER_STUB, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(stub, nullptr) << dlerror();
  for (int i = 0; i < kHookCount; ++i) {
    const HookInfo& h = kHooks[i];
    if (h.library != Library::kDriver) continue;
    EXPECT_NE(dlsym(stub, h.name), nullptr) << h.name << " is not a driver entry point";
    // With the driver loaded (outside the global scope, as libcudart loads
    // it), the row resolves to it.
    void* real = ResolveReal(static_cast<HookId>(i));
    EXPECT_EQ(real, dlsym(stub, h.name)) << h.name;
  }
  dlclose(stub);
}

TEST(InterposeHookTable, EveryRowExistsInLibcudart13) {
  void* cudart = dlopen("libcudart.so.13", RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(cudart, nullptr) << dlerror();
  for (int i = 0; i < kHookCount; ++i) {
    const HookInfo& h = kHooks[i];
    if (h.library != Library::kCudart) continue;
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
    if (kHooks[i].library != Library::kCudart) continue;
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

TEST(InterposeHookTable, AMissingDriverFunctionIsNotFoundNeverCalled) {
  // No driver is loaded in this process: the row cannot resolve.
  if (dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD) != nullptr)
    GTEST_SKIP() << "a driver is loaded";
  CUdeviceptr p = 0;
  EXPECT_EQ(CallReal<HookId::cuMemAlloc_v2>(&p, size_t{4096}), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(RealDriverSymbol("cuFuncGetParamInfo"), nullptr);
}

}  // namespace
}  // namespace kvtier::interpose
