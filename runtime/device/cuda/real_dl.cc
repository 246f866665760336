// RealDl: see real_dl.h.
#include "runtime/device/cuda/real_dl.h"

#include <dlfcn.h>

namespace kvtier::cuda {
namespace {

// Constant-initialised: usable before any constructor has run (the dlsym
// hook can be called by another library's constructor, or by the sanitizer
// runtime while it starts). Accessed with the __atomic builtins, not
// std::atomic: its member functions are out-of-line, instrumented code in a
// sanitizer build (see real_dl.h).
DlsymFn g_real_dlsym = nullptr;
constexpr const char* kVersions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17"};

}  // namespace

KVTIER_NOT_SANITIZED DlsymFn RealDlsymFunction() {
  DlsymFn fn = __atomic_load_n(&g_real_dlsym, __ATOMIC_ACQUIRE);
  if (fn != nullptr) return fn;
  // glibc 2.34 moved dlsym into libc.so.6 as dlsym@@GLIBC_2.34; older ones
  // define dlsym@GLIBC_2.2.5 (x86-64) or @GLIBC_2.17 (AArch64) in libdl.
  // dlvsym is not hooked, and RTLD_NEXT is relative to the object this code
  // is linked into.
  for (size_t i = 0; i < sizeof kVersions / sizeof kVersions[0] && fn == nullptr; ++i) {
    fn = reinterpret_cast<DlsymFn>(dlvsym(RTLD_NEXT, "dlsym", kVersions[i]));
  }
  if (fn != nullptr) __atomic_store_n(&g_real_dlsym, fn, __ATOMIC_RELEASE);
  return fn;
}

KVTIER_NOT_SANITIZED void* RealDlsym(void* handle, const char* name) {
  DlsymFn fn = RealDlsymFunction();
  return fn ? fn(handle, name) : nullptr;
}

}  // namespace kvtier::cuda
