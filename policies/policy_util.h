// Building blocks the policies share: which pages may move, and how many
// bytes a tier must shed.
// Thread-safety: pure functions of the view (policy thread).
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/policy.h"

namespace kvtier {

// Pages on `tier` that are neither pinned nor in flight.
std::vector<PageRef> MovablePages(const PolicyView& view, Tier tier);
// Bytes that must leave a tier: used - low once used passes high, else 0.
uint64_t BytesOverWatermark(const TierUsage& usage);

}  // namespace kvtier
