/* entry_point_probe: asks the CUDA runtime for driver entry points
 * (cudaGetDriverEntryPoint[ByVersion], as PyTorch builds its driver table)
 * and checks what comes back. Run on the fake runtime and driver
 * (fake_driver/) through LD_LIBRARY_PATH, with and without the preload:
 * with kvtier a hooked driver function comes back as kvtier's wrapper (which
 * calls the driver's), everything else as the driver's own pointer; without
 * it everything is the driver's. Prints "entry_point_probe: OK (kvtier
 * loaded: yes|no)" and exits 0, or names each failed check and exits 1. */
#define _GNU_SOURCE
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdio.h>

static int failures = 0;

static void Check(int ok, const char* what) {
  if (!ok) {
    printf("FAILED: %s\n", what);
    ++failures;
  }
}

int main(void) {
  const int kvtier = dlsym(RTLD_DEFAULT, "kvtier_version") != NULL;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  void* (*fake)(const char*) =
      lib ? (void* (*)(const char*))dlsym(lib, "fake_driver_address") : NULL;
  int (*calls)(const char*) = lib ? (int (*)(const char*))dlsym(lib, "fake_driver_calls") : NULL;
  if (fake == NULL || calls == NULL) {
    printf("FAILED: libcuda.so.1 is not the fake driver (set LD_LIBRARY_PATH)\n");
    return 1;
  }
#define HOOKED(kv, drv) (kvtier ? dlsym(RTLD_DEFAULT, kv) : fake(drv))
  void* fn = NULL;
  enum cudaDriverEntryPointQueryResult status = cudaDriverEntryPointVersionNotSufficent;
  Check(
      cudaGetDriverEntryPointByVersion("cuMemAlloc", &fn, 13000, cudaEnableDefault, &status) == 0 &&
          status == cudaDriverEntryPointSuccess && fn == HOOKED("cuMemAlloc_v2", "cuMemAlloc_v2"),
      "ByVersion(cuMemAlloc, 13000)");
  CUresult (*alloc)(CUdeviceptr*, size_t) = (CUresult(*)(CUdeviceptr*, size_t))fn;
  Check(cudaGetDriverEntryPointByVersion("cuLaunchKernel", &fn, 13000,
                                         cudaEnablePerThreadDefaultStream, &status) == 0 &&
            fn == HOOKED("cuLaunchKernel_ptsz", "cuLaunchKernel_ptsz"),
        "ByVersion(cuLaunchKernel, per-thread stream)");
  Check(
      cudaGetDriverEntryPointByVersion("cuMemAlloc", &fn, 3000, cudaEnableDefault, &status) == 0 &&
          fn == fake("cuMemAlloc"),
      "ByVersion(cuMemAlloc, 3000) is the driver's v1, untouched");
  Check(cudaGetDriverEntryPointByVersion("cuGraphCreate", &fn, 13000, cudaEnableDefault, &status) ==
                0 &&
            fn == fake("cuGraphCreate"),
        "ByVersion(cuGraphCreate) is the driver's");
  fn = NULL;
  Check(cudaGetDriverEntryPointByVersion("cuNoSuchThing", &fn, 13000, cudaEnableDefault, &status) ==
                500 &&
            fn == NULL && status == cudaDriverEntryPointSymbolNotFound,
        "ByVersion of a missing symbol");
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  Check(cudaGetDriverEntryPoint("cuMemFree", &fn, cudaEnableDefault, &status) == 0 &&
            fn == HOOKED("cuMemFree_v2", "cuMemFree_v2"),
        "cudaGetDriverEntryPoint(cuMemFree)");
#pragma GCC diagnostic pop
  const int before = calls("cuMemAlloc_v2");
  CUdeviceptr p = 0;
  Check(alloc(&p, 4096) == CUDA_ERROR_NOT_INITIALIZED && calls("cuMemAlloc_v2") == before + 1,
        "the handed-out cuMemAlloc reaches the driver once and returns its code");
  printf("entry_point_probe: %s (kvtier loaded: %s)\n", failures ? "FAILED" : "OK",
         kvtier ? "yes" : "no");
  return failures ? 1 : 0;
}
