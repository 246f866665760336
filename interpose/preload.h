// Preload: how a hooked call decides what to do, and the library's start-up.
//
// Every hook opens a HookScope. The scope marks the thread as inside kvtier,
// so a CUDA call made by kvtier itself (the runtime, the logger, a backend)
// re-enters a hook and passes straight through to the real function. The
// process mode is decided once, lazily, on the first hooked call:
//   kPassThrough  KVTIER_BACKEND=off, or auto/cuda with no usable device:
//                 every hook calls the real function with the same arguments
//                 and returns what it returns.
//   kSim          KVTIER_BACKEND=sim: the memory subset of the runtime API is
//                 served by the simulated CUDA runtime (sim_cudart.h); matched
//                 allocations become tiered regions when the runtime started.
//   kTier         a real device backend runs: matched allocations become
//                 tiered regions, everything else passes through.
// The library constructor only parses the options (a bad KVTIER_* value stops
// the process at start); nothing is allocated before the loader is done.
// Thread-safety: any thread; the depth counter is per thread.
#pragma once

#include <cstdint>

namespace kvtier::interpose {

enum class Mode : uint8_t { kPassThrough = 0, kSim = 1, kTier = 2 };
const char* ModeName(Mode mode);

// The process mode (see above); decided once per process.
Mode ProcessMode();

// initial-exec: the counter lives in the static TLS block, so touching it
// never allocates (a preloaded library is always in the initial set).
[[gnu::tls_model("initial-exec")]] constinit inline thread_local int t_hook_depth = 0;

class HookScope {
 public:
  HookScope() : outermost_(t_hook_depth++ == 0) {}
  ~HookScope() { --t_hook_depth; }
  HookScope(const HookScope&) = delete;
  HookScope& operator=(const HookScope&) = delete;

  // kPassThrough for a call kvtier made itself, else the process mode.
  Mode mode() const { return outermost_ ? ProcessMode() : Mode::kPassThrough; }

 private:
  const bool outermost_;
};

}  // namespace kvtier::interpose
