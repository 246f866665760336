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

bool CameBack(const Signal& s) { return s.from == Tier::kHost || s.from == Tier::kDisk; }

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

void TickEngine::Returns::Period(uint64_t back, bool active, uint64_t now_ns, uint64_t settle_ns) {
  if (active) {
    run += back;
    active_ns = now_ns;
    quiet = false;
    return;
  }
  quiet = now_ns - std::min(now_ns, active_ns) >= settle_ns;
  if (!quiet || run == 0) return;
  reserve = std::max(run, reserve - reserve / 8);
  run = 0;
}

uint64_t TickEngine::KeepRoomAhead(PolicyView& view) const {
  TierUsage& device = view.tier[0];
  if (config_.room_ahead_ns == 0 || !returns_.quiet || device.budget == 0) return 0;
  // At most half the device: the rest holds what the engine works on.
  const uint64_t room = std::min(returns_.reserve, device.budget / 2);
  if (room == 0 || room >= device.high) return 0;
  const uint64_t target = device.high - room;
  // Down to the target only, unless the device is past its high watermark
  // anyway (then to the lower of the two).
  device.low = device.used > device.high ? std::min(device.low, target) : target;
  device.high = target;
  return room;
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
  if (config_.room_ahead_ns != 0) {
    uint64_t back = 0;
    bool active = false;
    for (const Signal& s : signals) {
      if (s.kind != SignalKind::kFault && s.kind != SignalKind::kAccess) continue;
      active = true;
      auto it = by_id_.find(s.region);
      if (CameBack(s) && it != by_id_.end()) back += uint64_t{s.pages} * it->second->page_size;
    }
    returns_.Period(back, active, clock_.NowNs(), config_.room_ahead_ns);
  }

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
  report.room_ahead = KeepRoomAhead(view);
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
