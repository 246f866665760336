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
    auto pct = [budget](uint64_t p) {
      return static_cast<uint64_t>(static_cast<unsigned __int128>(budget) * p / 100);
    };
    return {used, budget, pct(high_pct), pct(low_pct)};
  }
};

// Bytes the mover can still move this tick on each channel: up (host or
// disk -> device), down (device -> host) and spill (host -> disk). A policy
// plans within them; kUnlimited where the channel has no byte budget.
struct MoveBudget {
  static constexpr uint64_t kUnlimited = UINT64_MAX;
  uint64_t up = kUnlimited;
  uint64_t down = kUnlimited;
  uint64_t spill = kUnlimited;
  // What kDemand promotions (and their kRoom demotions) may take: they may
  // borrow ahead (see runtime/mover.h).
  uint64_t demand_up = kUnlimited;
  uint64_t demand_down = kUnlimited;
};

struct PolicyView {
  uint32_t now = 0;      // current policy tick
  uint64_t tick_ns = 0;  // length of a tick (0: unknown), for policies that plan in time
  const std::vector<RegionPtr>* regions = nullptr;
  TierUsage tier[kTierCount];  // indexed by Tier
  MoveBudget budget;
  const TierUsage& device() const { return tier[0]; }
  const TierUsage& host() const { return tier[1]; }
  const TierUsage& disk() const { return tier[2]; }
};

// Why a move is made. The mover executes demand promotions, then
// prefetches, then demotions, then spills; kRoom demotions go with the
// promotion that follows them in the policy's list (a swap: the demoted page
// makes the room the promoted one takes).
enum class MoveClass : uint8_t {
  kDefault = 0,   // by destination: device kPrefetch, host kDemote, disk kSpill
  kDemand = 1,    // a promotion the engine waits for (a faulting group, a hint),
                  // or a demotion without which the device fills (over its high watermark)
  kPrefetch = 2,  // a promotion ahead of a predicted use
  kRoom = 3,      // a demotion making room for the next move, a promotion
  kDemote = 4,    // a demotion keeping the device under its watermarks
  kSpill = 5,     // host -> disk
};

struct Move {
  RegionId region;
  uint32_t page;
  Tier to;
  MoveClass why = MoveClass::kDefault;
  bool operator==(const Move&) const = default;
};

struct Decisions {
  std::vector<Move> moves;  // the mover reorders them by class (see MoveClass)
  // Tick at which the policy wants to decide again even if no signal comes
  // (a predicted return); 0: only on signals. The runtime ticks every
  // period anyway; kvtier-bench, which skips idle ticks, honours it.
  uint32_t wake_tick = 0;
};

class Policy {
 public:
  virtual ~Policy() = default;
  virtual const char* name() const = 0;
  // Bookkeeping of the policy's own (ghost lists, frequency sketches).
  virtual void OnSignal(const Signal& signal, const Region& region) {}
  virtual void Decide(const PolicyView& view, Decisions* out) = 0;
};

// Settings some policies take (from the KVTIER_* options).
struct PolicySettings {
  bool predict = true;  // KVTIER_PREDICT (predictive)
};

}  // namespace kvtier
