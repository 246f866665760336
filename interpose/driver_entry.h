// DriverEntry: which driver function pointer a program gets back when it asks
// for one by name (dlsym on libcuda's handle, cuGetProcAddress[_v2],
// cudaGetDriverEntryPoint[ByVersion]).
//
// Rule: a pointer to a function kvtier hooks (a KVTIER_DRIVER_HOOK row) is
// swapped for kvtier's wrapper, which calls that same function; every other
// pointer (cuGraph*, cuGetExportTable, a variant kvtier does not know) is
// handed back untouched. A pointer is recognised by identity first (it is the
// real function a row resolved to), then by name: the requested name is a
// row's proc name, the requested version is at least the row's `since` and no
// newer than the CUDA release this table was written for (a later release may
// add a variant with other arguments), and the stream flag picks the _ptsz
// row when there is one. A wrapper recognised by name then calls exactly the
// pointer the driver handed back.
// Thread-safety: any thread; no locks (hook_table.h's lock-free resolution).
#pragma once

#include <cstdint>

namespace kvtier::interpose {

// dlsym(handle, name) found `real`: kvtier's wrapper for a hooked driver
// symbol whose real function is exactly `real`, else `real`.
void* WrapperForSymbol(const char* name, void* real);
// cuGetProcAddress(symbol, version, flags) returned `real`: kvtier's wrapper
// or `real` (rule above).
void* WrapperForProc(const char* symbol, void* real, int cuda_version, uint64_t flags);

}  // namespace kvtier::interpose
