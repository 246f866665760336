// VirtualTicker: the runtime's TickEngine on the virtual clock of a
// ModelDevice.
//
// Each tick is TickEngine::Tick, the code the runtime's policy thread runs:
// the same signal application, view, policy and Mover. What the bench adds
// is only when ticks happen and where signals wait: signals queue here (the
// device's faults become kFault signals), and a tick falls on each multiple
// of the tick period while there is a signal to read, the mover has moves
// under way or waiting, or the policy asked to be woken
// (Decisions::wake_tick), and early, as the runtime's policy thread ticks,
// on a fault from the host or disk, a driver eviction or a WILL_NEED hint
// (WakeSoon). Otherwise it sleeps until the next signal, so an idle hour of
// simulated time costs nothing.
// Thread-safety: none (the simulation's thread).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/policy.h"
#include "runtime/tick_engine.h"
#include "runtime/tick_schedule.h"
#include "tools/bench/model_device.h"

namespace kvtier::bench {

class VirtualTicker : public DeviceEvents {
 public:
  // `policy` may be null (uvm-default): faults are counted, nothing decided.
  VirtualTicker(ModelDevice* device, std::unique_ptr<Policy> policy,
                const TickEngineConfig& config);

  void AddRegion(RegionPtr region);
  const std::vector<RegionPtr>& regions() const { return regions_; }
  // Queues a signal (its time_ns is the virtual time it happened).
  void Push(const Signal& s);
  // Runs the ticks due at or before t_ns.
  void RunUntil(uint64_t t_ns);
  // Asks for a tick at the first boundary at or after t_ns even without a
  // signal (the engine's state changed in a way a policy may plan on).
  void Wake(uint64_t t_ns);
  // A tick at t_ns, or a fifth of a period (at least 1 ms) after the last
  // one if that is later: the runtime's early tick (Runtime::TickSoon) on a
  // fault from the host or disk, on a driver eviction and on a WILL_NEED hint.
  void WakeSoon(uint64_t t_ns);

  // The engine's totals (zeros without a policy).
  TickTotals totals() const { return engine_ ? engine_->totals() : TickTotals{}; }
  uint64_t driver_evictions() const { return driver_evictions_; }
  Policy* policy() { return policy_.get(); }

  // DeviceEvents
  void OnFault(Region& region, uint32_t page, Tier from, uint64_t wait_ns) override;
  void OnDriverEviction(Region& region, uint32_t page) override;

 private:
  static constexpr uint64_t kIdle = UINT64_MAX;
  void Tick(uint64_t t_ns);

  ModelDevice* const device_;
  std::unique_ptr<Policy> policy_;
  const uint64_t tick_ns_;
  std::unique_ptr<TickEngine> engine_;
  std::vector<RegionPtr> regions_;
  std::vector<Signal> pending_;
  TickSchedule schedule_;  // the early rule, shared with the runtime's policy thread
  uint64_t next_tick_ns_ = kIdle;
  uint64_t driver_evictions_ = 0;
};

}  // namespace kvtier::bench
