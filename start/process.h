// The process's kvtier: its options, its one runtime and what exit does to
// it. The composition root (start/bootstrap.cc) builds the runtime's parts
// for the backend KVTIER_BACKEND names, with the registry's policies: the
// only place where runtime/ and policies/ meet. The interposer reaches the
// runtime through here.
// Thread-safety: every function may be called from any thread.
#pragma once

#include "runtime/options.h"
#include "runtime/runtime.h"

namespace kvtier {

// The process's runtime, created on first use from the environment. Exits
// the process with status 2 on a configuration error (one line on stderr).
// Returns nullptr when kvtier is off (KVTIER_BACKEND=off, or auto/cuda with
// no usable device) or failed to start (then it warned once).
Runtime* ProcessRuntime();
// The runtime if it has started (or failed to), else nullptr; never starts
// it (for hooks that only act on blocks a runtime made).
Runtime* StartedRuntime();
// The process's options, parsed from the environment on first use (the
// library constructor calls it so a bad value stops the process at start).
const Options& ProcessOptions();
// Registers the exit handler that wipes the spill key
// (Runtime::WipeKeyAtExit), once: the library constructor calls it, so that
// the handler runs after those the program registers (exit runs them last
// registered first).
void WipeKeyAtProcessExit();

}  // namespace kvtier
