// Runtime::Parts as the process's start-up makes them: the registry's
// policies (the runtime knows policies only through the factory it is given).
#pragma once

#include <string_view>

#include "policies/registry.h"
#include "runtime/runtime.h"

namespace kvtier::testing {

inline Runtime::Parts PolicyParts() {
  Runtime::Parts parts;
  parts.policy = [](std::string_view name, const PolicySettings& settings) {
    return MakePolicy(name, settings);
  };
  return parts;
}

}  // namespace kvtier::testing
