/* A stand-in CUDA 13 runtime (libcudart.so.13, symbols @libcudart.so.13)
 * with only the driver entry-point functions, answering from the fake driver
 * (fake_libcuda.c) the way libcudart answers from the real one: the driver's
 * own pointers. entry_point_probe runs on it through LD_LIBRARY_PATH, so
 * kvtier's cudaGetDriverEntryPoint[ByVersion] hooks must swap in their
 * wrappers themselves. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>

typedef void* (*ProcFn)(const char*, int, unsigned long long);

static ProcFn Driver(void) {
  static ProcFn proc = NULL;
  if (proc == NULL) {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib != NULL) proc = (ProcFn)dlsym(lib, "fake_driver_proc");
  }
  return proc;
}

int cudaGetDriverEntryPointByVersion(const char* symbol, void** fn, unsigned version,
                                     unsigned long long flags, int* status) {
  ProcFn proc = Driver();
  if (proc == NULL || fn == NULL) return 35; /* cudaErrorInsufficientDriver */
  *fn = proc(symbol, (int)version, flags);
  if (status) *status = *fn ? 0 : 1; /* success, symbol not found */
  return *fn ? 0 : 500;              /* cudaErrorSymbolNotFound */
}

int cudaGetDriverEntryPoint(const char* symbol, void** fn, unsigned long long flags, int* status) {
  return cudaGetDriverEntryPointByVersion(symbol, fn, 13000, flags, status);
}
