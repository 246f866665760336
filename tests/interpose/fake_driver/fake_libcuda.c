/* A stand-in CUDA driver (libcuda.so.1) for the interposer's tests: the entry
 * points libcudart and engines look up, with deterministic answers and a call
 * counter per function. It has no device: cuInit fails with
 * CUDA_ERROR_NO_DEVICE, as a machine whose GPU is gone would. It lacks
 * cuMemAllocManaged on purpose (kvtier's hook must then answer "not found",
 * never call a null pointer). Tests load it through LD_LIBRARY_PATH.
 * cuFuncGetParamInfo knows one kernel, kFakeKernel (0x1000): a pointer
 * (offset 0), an int (offset 8) and a 16-byte struct {pointer, count}
 * (offset 16).
 *   fake_driver_calls(name)    how often the named fake function ran
 *   fake_driver_address(name)  the fake's own function of that name
 *   fake_driver_proc(name, version, flags)
 *                              what its cuGetProcAddress would hand back */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

enum {
  kSuccess = 0,
  kInvalidValue = 1,
  kNotInitialized = 3,
  kNoDevice = 100,
  kNotFound = 500,
  kNotSupported = 801,
};

#define EXPORT __attribute__((visibility("default")))

static int g_calls[32];
enum {
  cInit,
  cDriverGetVersion,
  cMemAlloc_v2,
  cMemAlloc_v1,
  cMemFree_v2,
  cMemGetInfo_v2,
  cLaunchKernel,
  cLaunchKernel_ptsz,
  cGraphCreate,
  cGetExportTable,
  cGetErrorName,
  cGetProcAddress_v1,
  cGetProcAddress_v2,
  cCount
};
static const char* const kNames[cCount] = {"cuInit",
                                           "cuDriverGetVersion",
                                           "cuMemAlloc_v2",
                                           "cuMemAlloc",
                                           "cuMemFree_v2",
                                           "cuMemGetInfo_v2",
                                           "cuLaunchKernel",
                                           "cuLaunchKernel_ptsz",
                                           "cuGraphCreate",
                                           "cuGetExportTable",
                                           "cuGetErrorName",
                                           "cuGetProcAddress",
                                           "cuGetProcAddress_v2"};

EXPORT CUresult cuInit(unsigned flags) {
  ++g_calls[cInit];
  return kNoDevice;
}
EXPORT CUresult cuDriverGetVersion(int* v) {
  ++g_calls[cDriverGetVersion];
  if (!v) return kInvalidValue;
  *v = 13000;
  return kSuccess;
}
EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t n) {
  ++g_calls[cMemAlloc_v2];
  return kNotInitialized;
}
EXPORT CUresult cuMemAlloc(unsigned* p, unsigned n) {
  ++g_calls[cMemAlloc_v1];
  return kNotInitialized;
}
EXPORT CUresult cuMemFree_v2(CUdeviceptr p) {
  ++g_calls[cMemFree_v2];
  return kNotInitialized;
}
EXPORT CUresult cuMemGetInfo_v2(size_t* f, size_t* t) {
  ++g_calls[cMemGetInfo_v2];
  return kNotInitialized;
}
EXPORT CUresult cuLaunchKernel(void* f, unsigned a, unsigned b, unsigned c, unsigned d, unsigned e,
                               unsigned g, unsigned s, void* st, void** p, void** x) {
  ++g_calls[cLaunchKernel];
  return kNotInitialized;
}
EXPORT CUresult cuLaunchKernel_ptsz(void* f, unsigned a, unsigned b, unsigned c, unsigned d,
                                    unsigned e, unsigned g, unsigned s, void* st, void** p,
                                    void** x) {
  ++g_calls[cLaunchKernel_ptsz];
  return kNotInitialized;
}
EXPORT CUresult cuGraphCreate(void** g, unsigned flags) {
  ++g_calls[cGraphCreate];
  return kNotInitialized;
}
EXPORT CUresult cuGetExportTable(const void** table, const void* id) {
  ++g_calls[cGetExportTable];
  return kNotSupported;
}
EXPORT CUresult cuGetErrorName(CUresult e, const char** s) {
  ++g_calls[cGetErrorName];
  if (!s) return kInvalidValue;
  *s = e == kNoDevice ? "CUDA_ERROR_NO_DEVICE" : "CUDA_ERROR_FAKE";
  return kSuccess;
}

EXPORT CUresult cuFuncGetParamInfo(void* f, size_t index, size_t* offset, size_t* size) {
  static const size_t kOffsets[] = {0, 8, 16}, kSizes[] = {8, 4, 16};
  if (f != (void*)0x1000 || index >= 3 || !offset || !size) return kInvalidValue;
  *offset = kOffsets[index];
  *size = kSizes[index];
  return kSuccess;
}

static void* Lookup(const char* symbol, int version, unsigned long long flags) {
  if (strcmp(symbol, "cuInit") == 0) return (void*)cuInit;
  if (strcmp(symbol, "cuDriverGetVersion") == 0) return (void*)cuDriverGetVersion;
  if (strcmp(symbol, "cuMemAlloc") == 0)
    return version >= 3020 ? (void*)cuMemAlloc_v2 : (void*)cuMemAlloc;
  if (strcmp(symbol, "cuMemFree") == 0) return (void*)cuMemFree_v2;
  if (strcmp(symbol, "cuMemGetInfo") == 0) return (void*)cuMemGetInfo_v2;
  if (strcmp(symbol, "cuLaunchKernel") == 0)
    return (flags & 2) ? (void*)cuLaunchKernel_ptsz : (void*)cuLaunchKernel;
  if (strcmp(symbol, "cuGraphCreate") == 0) return (void*)cuGraphCreate;
  if (strcmp(symbol, "cuGetExportTable") == 0) return (void*)cuGetExportTable;
  if (strcmp(symbol, "cuGetErrorName") == 0) return (void*)cuGetErrorName;
  if (strcmp(symbol, "cuGetProcAddress") == 0) {
    extern CUresult cuGetProcAddress(const char*, void**, int, unsigned long long);
    extern CUresult cuGetProcAddress_v2(const char*, void**, int, unsigned long long, int*);
    return version >= 12000 ? (void*)cuGetProcAddress_v2 : (void*)cuGetProcAddress;
  }
  return NULL;
}

EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int version,
                                 unsigned long long flags) {
  ++g_calls[cGetProcAddress_v1];
  if (!symbol || !pfn) return kInvalidValue;
  *pfn = Lookup(symbol, version, flags);
  return *pfn ? kSuccess : kNotFound;
}

EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version,
                                    unsigned long long flags, int* status) {
  ++g_calls[cGetProcAddress_v2];
  if (!symbol || !pfn) return kInvalidValue;
  *pfn = Lookup(symbol, version, flags);
  if (status) *status = *pfn ? 0 : 1; /* SUCCESS, SYMBOL_NOT_FOUND */
  return *pfn ? kSuccess : kNotFound;
}

EXPORT void* fake_driver_proc(const char* symbol, int version, unsigned long long flags) {
  return Lookup(symbol, version, flags);
}

EXPORT int fake_driver_calls(const char* name) {
  for (int i = 0; i < cCount; ++i) {
    if (strcmp(kNames[i], name) == 0) return g_calls[i];
  }
  return -1;
}

EXPORT void* fake_driver_address(const char* name) {
  if (strcmp(name, "cuMemAlloc_v2") == 0) return (void*)cuMemAlloc_v2;
  if (strcmp(name, "cuMemAlloc") == 0) return (void*)cuMemAlloc;
  if (strcmp(name, "cuMemFree_v2") == 0) return (void*)cuMemFree_v2;
  if (strcmp(name, "cuLaunchKernel_ptsz") == 0) return (void*)cuLaunchKernel_ptsz;
  if (strcmp(name, "cuGetProcAddress_v2") == 0) return (void*)cuGetProcAddress_v2;
  if (strcmp(name, "cuGetProcAddress") == 0) return (void*)cuGetProcAddress;
  return Lookup(name, 13000, 0);
}
