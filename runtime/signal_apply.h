// ApplySignal: how one access signal updates the page records it covers.
//
// The runtime's policy thread and the benchmark's model-only tick loop both
// call this before Policy::OnSignal/Decide, so every policy sees the same
// page state on a GPU, on the simulator and in kvtier-bench.
//
// Heat is stored undecayed as of last_access and decays lazily (halved every
// kHeatDecayTicks since last_access): read it through DecayedHeat. A lazy
// decay costs nothing on idle pages, where a periodic pass over every record
// would cost O(pages) on the policy thread.
//
// Thread-safety: the caller owns heat, last_access, last_move and refaults of
// the records (the policy thread); flags are atomics.
#pragma once

#include <cstdint>

#include "runtime/page_table.h"
#include "runtime/signal_ring.h"

namespace kvtier {

// A fault on a page that left the device (to host or disk) fewer than this
// many ticks after its last move counts as a refault: the move was a mistake.
inline constexpr uint32_t kRefaultWindowTicks = 100;
// Heat halves every this many ticks without an access.
inline constexpr uint32_t kHeatDecayTicks = 64;
inline constexpr uint32_t kHeatStep = 16;       // heat added per access
inline constexpr uint32_t kHeatMax = 1u << 20;  // saturation

// What applying a signal found, for the caller's counters.
struct SignalEffects {
  uint32_t refaults = 0;  // pages whose fault was a refault
};

// Applies `s` to the pages of `region` it covers (clipped to the region).
//  kFault    refault check (see kRefaultWindowTicks), last_move = now (the
//            fault migrated the page), then an access.
//  kAccess   an access: heat += kHeatStep (after decay), last_access = now.
//  kLaunch   nothing per page: a launch names a whole region, which says the
//            region is in use but not which pages (stamping every page would
//            erase the recency order policies rank by).
//  kWillNeed sets kPageWillNeed and last_access = now (recency, no heat: a
//            hint says soon, not often).
//  kCold     clears kPageWillNeed, heat = 0, last_access = 0.
//  kPin/kUnpin set/clear kPagePinned.
//  kEvicted  nothing per page (the device changed its tier); for policies.
// `now_tick` is the policy tick; ticks start at 1 (0 means "never").
void ApplySignal(Region& region, const Signal& s, uint32_t now_tick,
                 SignalEffects* effects = nullptr);

// The page's heat as of `now_tick`.
uint32_t DecayedHeat(const PageRecord& rec, uint32_t now_tick);

}  // namespace kvtier
