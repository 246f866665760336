// VirtualTicker (see virtual_ticker.h).
#include "tools/bench/virtual_ticker.h"

#include <algorithm>

namespace kvtier::bench {

VirtualTicker::VirtualTicker(ModelDevice* device, std::unique_ptr<Policy> policy,
                             const TickEngineConfig& config)
    : device_(device),
      policy_(std::move(policy)),
      tick_ns_(std::max<uint64_t>(config.tick_ns, 1)),
      schedule_(tick_ns_, 0) {
  if (!policy_) return;
  // As the runtime does: the device's link figures where none is given.
  TickEngineConfig c = config;
  FillLinkRates(device->link_rates(), &c.mover);
  engine_ = std::make_unique<TickEngine>(*device, *policy_, device->clock(), c);
}

void VirtualTicker::AddRegion(RegionPtr region) { regions_.push_back(std::move(region)); }

void VirtualTicker::Push(const Signal& s) {
  if (!engine_) return;
  pending_.push_back(s);
  Wake(s.time_ns);
}

void VirtualTicker::Wake(uint64_t t_ns) {
  if (!engine_) return;
  next_tick_ns_ = std::min(next_tick_ns_, (t_ns + tick_ns_ - 1) / tick_ns_ * tick_ns_);
}

void VirtualTicker::WakeSoon(uint64_t t_ns) {
  if (!engine_) return;
  next_tick_ns_ = std::min(next_tick_ns_, schedule_.EarlyAt(t_ns));
}

void VirtualTicker::OnFault(Region& region, uint32_t page, Tier from, uint64_t wait_ns) {
  Signal s;
  s.kind = SignalKind::kFault;
  s.region = region.id;
  s.page = page;
  s.pages = 1;
  s.from = from;
  s.time_ns = device_->now_ns();
  Push(s);
  if (from == Tier::kHost || from == Tier::kDisk) WakeSoon(s.time_ns);
}

void VirtualTicker::OnDriverEviction(Region& region, uint32_t page) {
  ++driver_evictions_;
  Signal s;
  s.kind = SignalKind::kEvicted;
  s.region = region.id;
  s.page = page;
  s.from = Tier::kDevice;
  s.time_ns = device_->now_ns();
  Push(s);
  WakeSoon(s.time_ns);
}

void VirtualTicker::RunUntil(uint64_t t_ns) {
  while (next_tick_ns_ != kIdle && next_tick_ns_ <= t_ns) Tick(next_tick_ns_);
}

void VirtualTicker::Tick(uint64_t t_ns) {
  schedule_.Start(t_ns);
  device_->AdvanceTo(t_ns);
  std::vector<Signal> signals;
  signals.swap(pending_);
  TierBytes usage;
  usage.host_used = device_->host_used_bytes();
  usage.host_budget = device_->costs().host_bytes;
  usage.disk_used = device_->disk_used_bytes();
  usage.disk_budget = device_->costs().disk_bytes;
  const TickReport report = engine_->Tick(signals, regions_, usage);
  // Keep ticking while there is something to read or move; else sleep until
  // the next signal or the policy's wake-up.
  next_tick_ns_ = (!pending_.empty() || report.busy()) ? t_ns + tick_ns_ : kIdle;
  if (report.wake_tick > report.tick) {
    const uint64_t wake_ns = uint64_t{report.wake_tick - 1} * tick_ns_;
    next_tick_ns_ = std::min(next_tick_ns_, std::max(wake_ns, t_ns + tick_ns_));
  }
}

}  // namespace kvtier::bench
