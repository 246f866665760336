// The kvtier_* C API (include/kvtier/kvtier.h), exported by libkvtier.so.
// Thread-safety: any thread.
#include <cerrno>

#include "interpose/preload.h"
#include "kvtier/kvtier.h"
#include "runtime/runtime.h"
#include "start/process.h"

#ifndef KVTIER_VERSION_STRING
#error "KVTIER_VERSION_STRING must come from the build (the project version)"
#endif

#define KVTIER_API extern "C" __attribute__((visibility("default")))

namespace {

// The process's runtime, or null when kvtier is off here.
kvtier::Runtime* ActiveRuntime() {
  if (kvtier::ProcessOptions().backend == kvtier::Backend::kOff) return nullptr;
  return kvtier::ProcessRuntime();
}

}  // namespace

KVTIER_API int kvtier_hint(const void* ptr, size_t len, int kind) {
  using kvtier::SignalKind;
  kvtier::interpose::HookScope scope;
  SignalKind signal;
  switch (kind) {
    case KVTIER_HINT_WILL_NEED:
      signal = SignalKind::kWillNeed;
      break;
    case KVTIER_HINT_COLD:
      signal = SignalKind::kCold;
      break;
    case KVTIER_HINT_PIN:
      signal = SignalKind::kPin;
      break;
    case KVTIER_HINT_UNPIN:
      signal = SignalKind::kUnpin;
      break;
    case KVTIER_HINT_DORMANT:
      signal = SignalKind::kCold;  // and more: see below
      break;
    default:
      return -EINVAL;
  }
  try {  // no exception may reach the caller
    kvtier::Runtime* rt = ActiveRuntime();
    if (rt == nullptr) return -ENODEV;
    if (!rt->regions().Find(reinterpret_cast<uintptr_t>(ptr))) return -ENOENT;
    const kvtier::Status s =
        kind == KVTIER_HINT_DORMANT ? rt->Dormant(ptr, len) : rt->Hint(ptr, len, signal);
    return s.ok() ? 0 : -EIO;
  } catch (...) {
    return -ENOMEM;
  }
}

KVTIER_API int kvtier_wait(const void* ptr, size_t len) {
  kvtier::interpose::HookScope scope;
  try {
    kvtier::Runtime* rt = ActiveRuntime();
    if (rt == nullptr) return -ENODEV;
    if (!rt->regions().Find(reinterpret_cast<uintptr_t>(ptr))) return -ENOENT;
    return rt->Wait(ptr, len).ok() ? 0 : -EIO;
  } catch (...) {
    return -ENOMEM;
  }
}

KVTIER_API const char* kvtier_version(void) { return KVTIER_VERSION_STRING; }
