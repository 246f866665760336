// TickEngine: one policy tick, the same code on a GPU, on the simulated GPU,
// in kvtier-bench and in the policy tests.
//
// A tick applies the access signals that arrived since the last one to the
// page records (ApplySignal, then Policy::OnSignal), builds the PolicyView
// from the tiers' usage, the watermarks and the mover's budgets, asks the
// policy to Decide, and hands the decisions to the Mover. What differs
// between the callers stays outside: where signals queue (the runtime's
// lock-free ring, the bench's list), where host and disk usage are booked,
// and the clock (wall time, a test's manual clock, the model device's
// virtual time).
// Tick numbers follow the clock (one per tick period since the engine was
// made, at least one more than the last), so the policies' windows, which
// count ticks, mean the same time whether a caller ticks every period (the
// runtime) or skips idle periods (kvtier-bench).
// Thread-safety: one thread at a time (the caller serialises Tick).
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "runtime/clock.h"
#include "runtime/counters.h"
#include "runtime/device/device.h"
#include "runtime/mover.h"
#include "runtime/policy.h"
#include "runtime/signal_ring.h"

namespace kvtier {

struct TickEngineConfig {
  uint64_t tick_ns = 10'000'000;  // KVTIER_TICK_MS
  int high_watermark = 90;        // percent (KVTIER_HIGH_WATERMARK)
  int low_watermark = 75;
  // Room ahead (KVTIER_ROOM_AHEAD_MS): once this long has passed without a
  // page fault or arrival, demote until the device has room for the
  // largest recent return; 0 = off.
  uint64_t room_ahead_ns = 0;
  MoverConfig mover;  // its tick_ns is set from tick_ns
};

// Gives each channel of `mover` without a figure (0) the device's: what
// the runtime and kvtier-bench do with KVTIER_LINK_BANDWIDTH=0.
inline void FillLinkRates(const Device::LinkRates& rates, MoverConfig* mover) {
  const double device_bps[kChannelCount] = {rates.up, rates.down, rates.spill};
  for (int ch = 0; ch < kChannelCount; ++ch) {
    if (mover->bps[ch] <= 0) mover->bps[ch] = device_bps[ch];
  }
}

// Host and disk usage as the caller books it (the device's comes from the
// Device).
struct TierBytes {
  uint64_t host_used = 0, host_budget = 0;
  uint64_t disk_used = 0, disk_budget = 0;
};

struct TickReport {
  uint32_t tick = 0;
  uint64_t room_ahead = 0;  // bytes the device was kept free for a return (0: none)
  MoveReport moves;
  uint32_t refaults = 0;
  uint32_t wake_tick = 0;  // the policy's Decisions::wake_tick
  // Moves happened or wait in the backlog: the next period has work.
  bool busy() const { return moves.moves > 0 || moves.deferred > 0; }
};

// Cumulative figures of an engine.
struct TickTotals {
  uint64_t ticks = 0;
  uint64_t signals = 0;
  uint64_t refaults = 0;
  uint64_t moves = 0;
  uint64_t failed = 0;
  uint64_t deferred = 0;  // moves that waited at least one tick (counted per tick waited)
  uint64_t dropped = 0;
  uint64_t policy_ns = 0;  // wall time in Tick, whatever the clock
};

class TickEngine {
 public:
  // `counters` (may be null) gets refaults, policy_ticks and policy_ns.
  TickEngine(Device& device, Policy& policy, const Clock& clock, const TickEngineConfig& config,
             Counters* counters = nullptr);

  Mover& mover() { return mover_; }
  Policy& policy() { return policy_; }
  const TickEngineConfig& config() const { return config_; }
  const TickTotals& totals() const { return totals_; }
  uint32_t tick() const { return tick_; }
  // The tick number Tick would use now.
  uint32_t TickAt(uint64_t now_ns) const;

  // One tick over `regions` (the live regions; the caller keeps them alive
  // for the call) with the signals that arrived since the last tick.
  TickReport Tick(std::span<const Signal> signals, const std::vector<RegionPtr>& regions,
                  const TierBytes& usage);
  // The first step of Tick alone: applies `signals` to the page records and
  // tells the policy, at tick `tick`; returns the refaults found. Tests use
  // it to set page state between ticks.
  uint32_t ApplySignals(std::span<const Signal> signals, const std::vector<RegionPtr>& regions,
                        uint32_t tick);
  // The bytes room ahead keeps free once the engine is quiet (see Returns).
  uint64_t room_ahead_bytes() const { return returns_.reserve; }

 private:
  // Returns: runs of periods in which pages came back from the host tier or
  // SSD (faults and arrivals ahead), each summed. The reserve is the largest
  // run, fading by an eighth with each smaller one (a workload whose returns
  // shrink gets its memory back within a few).
  struct Returns {
    uint64_t run = 0;        // bytes back in the current run
    uint64_t reserve = 0;    // room to keep free for the next run
    uint64_t active_ns = 0;  // when the last period with a fault or arrival ended
    bool quiet = false;      // none for settle_ns: a run has ended
    // This period's signals, at `now_ns`: `back` bytes came back; `active`:
    // any fault or arrival at all.
    void Period(uint64_t back, bool active, uint64_t now_ns, uint64_t settle_ns);
  };
  // Once the engine has been quiet for room_ahead_ns, lowers the device's
  // watermarks in `view` so that the policy makes the reserve's room;
  // returns the room kept (0: none).
  uint64_t KeepRoomAhead(PolicyView& view) const;

  Device& device_;
  Policy& policy_;
  const Clock& clock_;
  const TickEngineConfig config_;
  Counters* const counters_;
  Mover mover_;
  const uint64_t start_ns_;
  uint32_t tick_ = 0;
  TickTotals totals_;
  Returns returns_;
  std::unordered_map<RegionId, Region*> by_id_;  // this tick's regions
};

}  // namespace kvtier
