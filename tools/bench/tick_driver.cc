// TickDriver: Runtime::Tick on virtual time (see tick_driver.h).
#include "tools/bench/tick_driver.h"

#include "runtime/mover.h"
#include "runtime/signal_apply.h"

namespace kvtier::bench {

TickDriver::TickDriver(ModelDevice* device, std::unique_ptr<Policy> policy,
                       const TickConfig& config)
    : device_(device), policy_(std::move(policy)), config_(config) {}

void TickDriver::AddRegion(RegionPtr region) {
  by_id_[region->id] = region.get();
  regions_.push_back(std::move(region));
}

void TickDriver::Push(const Signal& s) {
  if (!policy_) return;
  pending_.push_back(s);
  Wake(s.time_ns);
}

void TickDriver::Wake(uint64_t t_ns) {
  if (!policy_ || next_tick_ns_ != kIdle) return;
  next_tick_ns_ = (t_ns + config_.tick_ns - 1) / config_.tick_ns * config_.tick_ns;
}

void TickDriver::OnFault(Region& region, uint32_t page, Tier from, uint64_t wait_ns) {
  Signal s;
  s.kind = SignalKind::kFault;
  s.region = region.id;
  s.page = page;
  s.pages = 1;
  s.from = from;
  s.time_ns = device_->now_ns();
  Push(s);
}

void TickDriver::OnDriverEviction(Region& region, uint32_t page) { ++stats_.driver_evictions; }

void TickDriver::RunUntil(uint64_t t_ns) {
  while (next_tick_ns_ != kIdle && next_tick_ns_ <= t_ns) Tick(next_tick_ns_);
}

void TickDriver::Tick(uint64_t t_ns) {
  device_->AdvanceTo(t_ns);
  const uint32_t tick = static_cast<uint32_t>(t_ns / config_.tick_ns) + 1;
  ++stats_.ticks;
  std::vector<Signal> signals;
  signals.swap(pending_);
  for (const Signal& s : signals) {
    auto it = by_id_.find(s.region);
    if (it == by_id_.end()) continue;
    SignalEffects fx;
    ApplySignal(*it->second, s, tick, &fx);
    stats_.refaults += fx.refaults;
    policy_->OnSignal(s, *it->second);
  }
  stats_.signals += signals.size();

  PolicyView view;
  view.now = tick;
  view.regions = &regions_;
  auto usage = [&](uint64_t used, uint64_t budget) {
    return TierUsage::Of(used, budget, static_cast<uint64_t>(config_.high_watermark),
                         static_cast<uint64_t>(config_.low_watermark));
  };
  const ModelCosts& c = device_->costs();
  view.tier[0] = usage(device_->resident_bytes(), device_->capacity_bytes());
  view.tier[1] = usage(device_->host_used_bytes(), c.host_bytes);
  view.tier[2] = usage(device_->disk_used_bytes(), c.disk_bytes);
  Decisions d;
  policy_->Decide(view, &d);

  uint64_t moved = 0;
  for (const Move& m : d.moves) {
    if (config_.move_bytes_per_tick && moved >= config_.move_bytes_per_tick) {
      ++stats_.moves_cut;
      continue;
    }
    auto it = by_id_.find(m.region);
    if (it == by_id_.end()) continue;
    Region& r = *it->second;
    MoveOutcome outcome = MovePage(*device_, r, m, tick);
    if (outcome == MoveOutcome::kAlreadyThere) continue;
    if (outcome == MoveOutcome::kFailed) {
      ++stats_.moves_failed;
      continue;
    }
    moved += r.page_size;
    ++stats_.moves;
  }
  // Keep ticking while there is something to read or the policy moved pages
  // (it may have more queued); otherwise sleep until the next signal.
  next_tick_ns_ = (!pending_.empty() || moved > 0) ? t_ns + config_.tick_ns : kIdle;
}

}  // namespace kvtier::bench
