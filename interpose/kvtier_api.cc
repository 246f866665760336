// The kvtier_* C API (include/kvtier/kvtier.h), exported by libkvtier.so.
// Thread-safety: any thread.
#include <cerrno>

#include "interpose/preload.h"
#include "kvtier/kvtier.h"
#include "runtime/runtime.h"

#ifndef KVTIER_VERSION_STRING
#error "KVTIER_VERSION_STRING must come from the build (the project version)"
#endif

#define KVTIER_API extern "C" __attribute__((visibility("default")))

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
    default:
      return -EINVAL;
  }
  try {  // no exception may reach the caller
    if (kvtier::Runtime::ProcessOptions().backend == "off") return -ENODEV;
    kvtier::Runtime* rt = kvtier::Runtime::Get();
    if (rt == nullptr) return -ENODEV;
    return rt->Hint(ptr, len, signal).ok() ? 0 : -ENOENT;
  } catch (...) {
    return -ENOMEM;
  }
}

KVTIER_API const char* kvtier_version(void) { return KVTIER_VERSION_STRING; }
