// StartStepCheck: a test seam for start-up's failure paths.
//
// Runtime::Create and the simulated GPU's Create ask the check before each
// fallible step they take, by name ("policy", "device", "disk tier",
// "userfaultfd", ...). An error makes that step fail with it, as if the step's
// own call had failed, so a test can make every step fail in turn and see
// that each failure ends in one warning or one error, never in a half-built
// runtime. Production passes no check: each step costs one empty test.
// Thread-safety: called on the thread that runs Create.
#pragma once

#include <functional>

#include "runtime/status.h"

namespace kvtier {

using StartStepCheck = std::function<Status(const char* step)>;

// OK without a check; else what the check says about `step`.
inline Status CheckStartStep(const StartStepCheck& check, const char* step) {
  return check ? check(step) : Status::Ok();
}

}  // namespace kvtier
