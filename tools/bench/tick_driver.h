// TickDriver: the runtime's policy tick on the virtual clock of a ModelDevice.
//
// Mirrors Runtime::Tick: drain the access signals (ApplySignal, then
// Policy::OnSignal), build the PolicyView from the device's usage and the
// watermarks, Decide, and execute the moves in order through the device
// until the per-tick byte cap (KVTIER_MOVE_BYTES_PER_TICK), stamping
// last_move on each page moved. Ticks fall on multiples of the tick period;
// a tick with no signal to read after one that moved nothing is skipped
// (nothing could change the decision), so an idle hour costs nothing.
// It is also the device's DeviceEvents: faults become kFault signals.
// Thread-safety: none (the simulation's thread).
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "runtime/device/model/model_device.h"
#include "runtime/policy.h"

namespace kvtier::bench {

struct TickConfig {
  uint64_t tick_ns = 10'000'000;                // KVTIER_TICK_MS default
  uint64_t move_bytes_per_tick = 256ull << 20;  // KVTIER_MOVE_BYTES_PER_TICK default; 0 = none
  int high_watermark = 90;                      // percent (KVTIER_HIGH_WATERMARK)
  int low_watermark = 75;
};

struct TickStats {
  uint64_t ticks = 0;
  uint64_t signals = 0;
  uint64_t moves = 0;
  uint64_t moves_cut = 0;     // beyond the byte cap
  uint64_t moves_failed = 0;  // refused by the device (e.g. host tier full)
  uint64_t refaults = 0;
  uint64_t driver_evictions = 0;
};

class TickDriver : public DeviceEvents {
 public:
  // `policy` may be null: faults are still counted, nothing is decided.
  TickDriver(ModelDevice* device, std::unique_ptr<Policy> policy, const TickConfig& config);

  void AddRegion(RegionPtr region);
  const std::vector<RegionPtr>& regions() const { return regions_; }
  // Queues a signal (its time_ns is the virtual time it happened).
  void Push(const Signal& s);
  // Runs the ticks due at or before t_ns.
  void RunUntil(uint64_t t_ns);
  // Asks for a tick at the first boundary at or after t_ns even without a
  // signal (the engine's state changed in a way a policy may plan on).
  void Wake(uint64_t t_ns);
  const TickStats& stats() const { return stats_; }
  Policy* policy() { return policy_.get(); }

  // DeviceEvents
  void OnFault(Region& region, uint32_t page, Tier from, uint64_t wait_ns) override;
  void OnDriverEviction(Region& region, uint32_t page) override;

 private:
  static constexpr uint64_t kIdle = UINT64_MAX;
  void Tick(uint64_t t_ns);

  ModelDevice* const device_;
  std::unique_ptr<Policy> policy_;
  const TickConfig config_;
  std::vector<RegionPtr> regions_;
  std::unordered_map<RegionId, Region*> by_id_;
  std::vector<Signal> pending_;
  uint64_t next_tick_ns_ = kIdle;
  TickStats stats_;
};

}  // namespace kvtier::bench
