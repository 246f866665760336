// Preload: process mode and library start-up (see preload.h).
#include "interpose/preload.h"

#include <atomic>

#include "runtime/log.h"
#include "runtime/runtime.h"
#include "start/process.h"

namespace kvtier::interpose {
namespace {

constexpr int kUndecided = -1;
std::atomic<int> g_mode{kUndecided};

Mode DecideMode() {
  const Options& options = ProcessOptions();
  if (options.backend == Backend::kSim) return Mode::kSim;
  // host tiers heap blocks (host_alloc.cc); CUDA calls pass through.
  if (options.backend == Backend::kOff || options.backend == Backend::kHost) {
    return Mode::kPassThrough;
  }
  // auto or cuda: tier only when a device backend started. Without one the
  // program must see exactly what the real libcudart says.
  return ProcessRuntime() != nullptr ? Mode::kTier : Mode::kPassThrough;
}

// Runs after the loader has relocated this library and its dependencies, so
// malloc and getenv are safe here. Parsing the options now makes a bad value
// stop every process at start (exit 2, one line), CUDA or not; the runtime
// itself starts on the first hooked call.
__attribute__((constructor)) void PreloadInit() {
  HookScope scope;
  (void)ProcessOptions();
  // Now, before the program's constructors register their exit handlers
  // and destructors: the spill key is wiped after they ran.
  WipeKeyAtProcessExit();
}

}  // namespace

const char* ModeName(Mode mode) {
  switch (mode) {
    case Mode::kPassThrough:
      return "pass-through";
    case Mode::kSim:
      return "sim";
    case Mode::kTier:
      return "tier";
  }
  return "?";
}

Mode ProcessMode() {
  int m = g_mode.load(std::memory_order_acquire);
  if (m != kUndecided) return static_cast<Mode>(m);
  // Racing first calls decide the same thing; ProcessRuntime serialises the
  // runtime's creation itself.
  Mode decided = DecideMode();
  int expected = kUndecided;
  if (g_mode.compare_exchange_strong(expected, static_cast<int>(decided),
                                     std::memory_order_acq_rel)) {
    Log(1, "interposer mode: %s", ModeName(decided));
  }
  return static_cast<Mode>(g_mode.load(std::memory_order_acquire));
}

}  // namespace kvtier::interpose
