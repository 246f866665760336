// TickEngine (see tick_engine.h).
#include "runtime/tick_engine.h"

#include <algorithm>

#include "runtime/signal_apply.h"

namespace kvtier {
namespace {

MoverConfig WithTick(MoverConfig m, uint64_t tick_ns) {
  m.tick_ns = tick_ns;
  return m;
}

}  // namespace

TickEngine::TickEngine(Device& device, Policy& policy, const Clock& clock,
                       const TickEngineConfig& config, Counters* counters)
    : device_(device),
      policy_(policy),
      clock_(clock),
      config_(config),
      counters_(counters),
      mover_(device, clock, WithTick(config.mover, config.tick_ns)),
      start_ns_(clock.NowNs()) {}

uint32_t TickEngine::TickAt(uint64_t now_ns) const {
  const uint64_t elapsed = now_ns > start_ns_ ? now_ns - start_ns_ : 0;
  const uint64_t by_time = elapsed / std::max<uint64_t>(config_.tick_ns, 1) + 1;
  return static_cast<uint32_t>(std::max<uint64_t>(by_time, uint64_t{tick_} + 1));
}

uint32_t TickEngine::ApplySignals(std::span<const Signal> signals,
                                  const std::vector<RegionPtr>& regions, uint32_t tick) {
  by_id_.clear();
  for (const RegionPtr& r : regions) by_id_[r->id] = r.get();
  uint32_t refaults = 0;
  for (const Signal& s : signals) {
    auto it = by_id_.find(s.region);
    if (it == by_id_.end()) continue;  // the region was freed since
    SignalEffects effects;
    ApplySignal(*it->second, s, tick, &effects);
    refaults += effects.refaults;
    policy_.OnSignal(s, *it->second);
  }
  return refaults;
}

TickReport TickEngine::Tick(std::span<const Signal> signals, const std::vector<RegionPtr>& regions,
                            const TierBytes& usage) {
  const uint64_t wall0 = MonotonicNs();
  tick_ = TickAt(clock_.NowNs());
  TickReport report;
  report.tick = tick_;

  report.refaults = ApplySignals(signals, regions, tick_);

  PolicyView view;
  view.now = tick_;
  view.tick_ns = config_.tick_ns;
  view.regions = &regions;
  auto tier = [&](uint64_t used, uint64_t budget) {
    return TierUsage::Of(used, budget, static_cast<uint64_t>(config_.high_watermark),
                         static_cast<uint64_t>(config_.low_watermark));
  };
  view.tier[0] = tier(device_.resident_bytes(), device_.capacity_bytes());
  view.tier[1] = tier(usage.host_used, usage.host_budget);
  view.tier[2] = tier(usage.disk_used, usage.disk_budget);
  view.budget = mover_.Budget();
  Decisions decisions;
  policy_.Decide(view, &decisions);
  report.wake_tick = decisions.wake_tick;

  auto find = [this](RegionId id) -> Region* {
    auto it = by_id_.find(id);
    return it == by_id_.end() ? nullptr : it->second;
  };
  const bool host_over = usage.host_budget != 0 && usage.host_used > usage.host_budget;
  report.moves = mover_.Execute(decisions, find, tick_, host_over);

  const uint64_t spent = MonotonicNs() - wall0;
  ++totals_.ticks;
  totals_.signals += signals.size();
  totals_.refaults += report.refaults;
  totals_.moves += report.moves.moves;
  totals_.failed += report.moves.failed;
  totals_.deferred += report.moves.deferred;
  totals_.dropped += report.moves.dropped;
  totals_.policy_ns += spent;
  if (counters_) {
    if (report.refaults) Counters::Add(counters_->refaults, report.refaults);
    Counters::Add(counters_->policy_ticks);
    Counters::Add(counters_->policy_ns, spent);
  }
  return report;
}

}  // namespace kvtier
