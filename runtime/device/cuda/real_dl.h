// RealDl: libc's own dlsym, for code that must not meet kvtier's dlsym hook.
//
// libkvtier.so defines dlsym (interpose/dlsym_hook.cc) so that a lookup of a
// hooked CUDA driver function on libcuda's handle returns kvtier's wrapper.
// kvtier itself needs the real driver functions (the CUDA backend allocates
// its managed memory through them), so it looks symbols up through this
// function, which calls the dlsym that comes after libkvtier.so in the
// lookup order (libc's), found with dlvsym(RTLD_NEXT) once.
// The dlsym hook runs before the sanitizer runtimes have started (they look
// their interceptors up with dlsym(RTLD_NEXT) while they start), so the code
// on that path is built without sanitizer instrumentation
// (KVTIER_NOT_SANITIZED): instrumented code would touch shadow memory that
// does not exist yet.
// Thread-safety: any thread; the first call resolves and caches (racing
// first calls store the same pointer). Never allocates.
#pragma once

#include "runtime/not_sanitized.h"

namespace kvtier::cuda {

using DlsymFn = void* (*)(void* handle, const char* name);

// libc's dlsym (never kvtier's); nullptr only on a C library that has none.
KVTIER_NOT_SANITIZED DlsymFn RealDlsymFunction();
// RealDlsymFunction()(handle, name), or nullptr when there is none.
KVTIER_NOT_SANITIZED void* RealDlsym(void* handle, const char* name);

}  // namespace kvtier::cuda
