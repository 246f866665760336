// The policies KVTIER_POLICY can name, by name. The runtime's default policy
// factory, kvtier-bench and the tools create policies here.
// Thread-safety: safe from any thread (the table is built once).
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "runtime/policy.h"

namespace kvtier {

// Creates the policy named by KVTIER_POLICY; nullptr for an unknown name.
std::unique_ptr<Policy> MakePolicy(std::string_view name, const PolicySettings& settings = {});
// Names MakePolicy accepts, for messages ("lru|...").
const std::vector<std::string_view>& PolicyNames();

}  // namespace kvtier
