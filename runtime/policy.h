// Policy: pure placement decisions.
//
// Given the page records of every region and the usage of each tier, a policy
// returns the moves to make this tick. It never calls CUDA, does I/O or takes
// backend locks, so every policy is unit-testable from a table of page states
// and runs unchanged on the simulator and on a GPU. The policy thread applies
// access signals to the page records (heat, last_access, refaults) before it
// calls Decide. Thread-safety: a Policy is used by the policy thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "runtime/page_table.h"
#include "runtime/signal_ring.h"

namespace kvtier {

struct TierUsage {
  uint64_t used = 0;    // bytes on the tier now
  uint64_t budget = 0;  // 0: the tier does not exist
  uint64_t high = 0;    // start demoting out of the tier above this
  uint64_t low = 0;     // ... down to this

  // A tier's usage with watermarks given in percent of its budget.
  static TierUsage Of(uint64_t used, uint64_t budget, uint64_t high_pct, uint64_t low_pct) {
    return {used, budget, budget / 100 * high_pct, budget / 100 * low_pct};
  }
};

struct PolicyView {
  uint32_t now = 0;  // current policy tick
  const std::vector<RegionPtr>* regions = nullptr;
  TierUsage tier[kTierCount];  // indexed by Tier
  const TierUsage& device() const { return tier[0]; }
  const TierUsage& host() const { return tier[1]; }
  const TierUsage& disk() const { return tier[2]; }
};

struct Move {
  RegionId region;
  uint32_t page;
  Tier to;
  bool operator==(const Move&) const = default;
};

struct Decisions {
  std::vector<Move> moves;  // executed in order; demotions should come first
};

class Policy {
 public:
  virtual ~Policy() = default;
  virtual const char* name() const = 0;
  // Bookkeeping of the policy's own (ghost lists, frequency sketches).
  virtual void OnSignal(const Signal& signal, const Region& region) {}
  virtual void Decide(const PolicyView& view, Decisions* out) = 0;
};

// Creates the policy named by KVTIER_POLICY; nullptr for an unknown name.
// move_bytes_per_tick is the mover's cap (0: none), so a policy plans no more
// than one tick can move.
std::unique_ptr<Policy> MakePolicy(std::string_view name, uint64_t move_bytes_per_tick = 0);
// Names MakePolicy accepts, for messages ("lru|...").
const std::vector<std::string_view>& PolicyNames();

}  // namespace kvtier
