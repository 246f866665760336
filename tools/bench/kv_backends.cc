// HbmBackend, OffloadBackend and PagedBackend (see kv_backends.h).
#include "tools/bench/kv_backends.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace kvtier::bench {

// ---- hbm-only ----

Occupancy HbmBackend::Sample(double t) const {
  Occupancy o;
  o.t = t;
  o.device = static_cast<uint64_t>(engine_ ? engine_->resident_blocks() * block_bytes_ : 0);
  return o;
}

// ---- explicit offload ----

OffloadBackend::OffloadBackend(const EngineConfig& engine, uint64_t pool_blocks,
                               uint64_t store_bytes, double link_bps, int shared_blocks)
    : HbmBackend(engine, pool_blocks),
      capacity_blocks_(static_cast<uint64_t>(store_bytes / engine.block_bytes())),
      link_bps_(link_bps),
      shared_blocks_(shared_blocks) {}

uint64_t OffloadBackend::Key(int session, int index) const {
  const uint32_t owner = index < shared_blocks_ ? 0xffffffffu : static_cast<uint32_t>(session);
  return (uint64_t{owner} << 32) | static_cast<uint32_t>(index);
}

int OffloadBackend::ExternalHitBlocks(int session, int first, int max) {
  int n = 0;
  while (n < max) {
    auto it = store_.find(Key(session, first + n));
    if (it == store_.end()) break;
    lru_.splice(lru_.end(), lru_, it->second);
    ++n;
  }
  return n;
}

void OffloadBackend::OnFinish(const Request& r) {
  // Write-through of every full block not stored yet; the copy runs on the
  // device-to-host direction of the link, off the critical path.
  const int full = r.cached_blocks;
  for (int i = 0; i < full; ++i) {
    const uint64_t key = Key(r.session, i);
    auto it = store_.find(key);
    if (it != store_.end()) {
      lru_.splice(lru_.end(), lru_, it->second);
      continue;
    }
    if (capacity_blocks_ == 0) return;
    if (store_.size() >= capacity_blocks_) {
      store_.erase(lru_.front());
      lru_.pop_front();
    }
    lru_.push_back(key);
    store_[key] = std::prev(lru_.end());
    counters_.d2h_store += static_cast<uint64_t>(block_bytes_);
  }
}

double OffloadBackend::RunStep(std::vector<Request*>& batch, double start_s, double overhead_s,
                               double compute_s) {
  double t = start_s;
  for (Request* r : batch) {
    if (r->pending_load_blocks == 0) continue;
    const double bytes = r->pending_load_blocks * block_bytes_;
    t += bytes / link_bps_;  // synchronous: the whole step waits
    counters_.h2d_load += static_cast<uint64_t>(bytes);
  }
  return t + overhead_s + compute_s;
}

Occupancy OffloadBackend::Sample(double t) const {
  Occupancy o = HbmBackend::Sample(t);
  o.host = static_cast<uint64_t>(store_.size() * block_bytes_);
  return o;
}

// ---- paged: UVM, kvtier, oracle ----

PagedBackend::PagedBackend(const EngineConfig& engine, const ModelCosts& costs,
                           uint64_t pool_blocks, size_t page_size, std::unique_ptr<Policy> policy,
                           const TickEngineConfig& tick, bool hints)
    : engine_config_(engine),
      pool_blocks_(pool_blocks),
      page_size_(page_size),
      hints_(hints),
      device_(costs, this),
      driver_(&device_, std::move(policy), tick) {}

Status PagedBackend::Init() {
  const double per_layer = engine_config_.block_bytes_per_layer();
  const double ratio = page_size_ / per_layer;
  if (ratio < 1 || std::fabs(ratio - std::round(ratio)) > 1e-9) {
    return Status::Errorf(
        "--page-size %zu: a KV block takes %.0f bytes per layer; the page size "
        "must be a multiple of it",
        page_size_, per_layer);
  }
  blocks_per_page_ = static_cast<uint32_t>(std::lround(ratio));
  const size_t bytes = static_cast<size_t>(pool_blocks_ * per_layer);
  for (int l = 0; l < engine_config_.shape.layers; ++l) {
    Result<RegionPtr> r = device_.CreateRegion(static_cast<RegionId>(l + 1), bytes, page_size_,
                                               "kv layer " + std::to_string(l));
    if (!r.ok()) return r.status();
    driver_.AddRegion(r.value());
    layers_.push_back(r.value());
  }
  return Status::Ok();
}

void PagedBackend::OnFault(Region& region, uint32_t page, Tier from, uint64_t wait_ns) {
  driver_.OnFault(region, page, from, wait_ns);
}

void PagedBackend::OnDriverEviction(Region& region, uint32_t page) {
  driver_.OnDriverEviction(region, page);
}

void PagedBackend::OnFinish(const Request& r) {
  driver_.Wake(Ns(r.finish_s));  // a policy that plans ahead (the oracle) replans
}

void PagedBackend::ClassifyHits(Request& r, int hit_blocks, int block_tokens) {
  // Tokens of the hit by where their pages are when the request is admitted
  // (a page on its way up still has to arrive: it counts where it comes from).
  const double layers = static_cast<double>(layers_.size());
  double dev = 0, host = 0;
  std::unordered_map<uint32_t, std::array<int, 3>> by_page;
  for (int i = 0; i < hit_blocks; ++i) {
    const uint32_t page = static_cast<uint32_t>(r.blocks[i]) / blocks_per_page_;
    auto [it, fresh] = by_page.try_emplace(page);
    if (fresh) {
      it->second = {0, 0, 0};
      for (const RegionPtr& l : layers_) {
        const PageRecord& rec = l->pages[page];
        const Tier t = rec.tier.load(std::memory_order_relaxed);
        const bool moving = rec.flags.load(std::memory_order_relaxed) & kPageInFlight;
        if (t == Tier::kDevice || t == Tier::kUntouched) {
          ++it->second[0];
        } else if (t == Tier::kHost || (moving && t != Tier::kDisk)) {
          ++it->second[1];
        } else {
          ++it->second[2];
        }
      }
    }
    dev += block_tokens * it->second[0] / layers;
    host += block_tokens * it->second[1] / layers;
  }
  const int total = hit_blocks * block_tokens;
  r.hit_device = std::min(total, static_cast<int>(std::lround(dev)));
  r.hit_host = std::min(total - r.hit_device, static_cast<int>(std::lround(host)));
  r.hit_disk = total - r.hit_device - r.hit_host;
  driver_.Wake(device_.now_ns());
}

void PagedBackend::Hint(const std::vector<uint32_t>& pages, uint64_t t_ns) {
  // One WILL_NEED per run of consecutive pages per layer, as a plugin calling
  // kvtier_hint on each contiguous range would.
  for (const RegionPtr& l : layers_) {
    size_t i = 0;
    while (i < pages.size()) {
      size_t j = i + 1;
      while (j < pages.size() && pages[j] == pages[j - 1] + 1) ++j;
      Signal s;
      s.kind = SignalKind::kWillNeed;
      s.region = l->id;
      s.page = pages[i];
      s.pages = static_cast<uint32_t>(j - i);
      s.time_ns = t_ns;
      driver_.Push(s);
      i = j;
    }
  }
}

double PagedBackend::RunStep(std::vector<Request*>& batch, double start_s, double overhead_s,
                             double compute_s) {
  const uint64_t epoch0 = device_.residency_epoch();
  std::vector<uint32_t> pages;
  std::vector<Request*> checked;
  for (Request* r : batch) {
    if (r->verified_epoch == epoch0 && r->verified_pages == r->pages.size()) continue;
    pages.insert(pages.end(), r->pages.begin(), r->pages.end());
    checked.push_back(r);
  }
  uint64_t t = Ns(start_s + overhead_s);
  const uint64_t compute_ns = Ns(compute_s);
  if (pages.empty()) return (t + compute_ns) / 1e9;
  std::sort(pages.begin(), pages.end());
  pages.erase(std::unique(pages.begin(), pages.end()), pages.end());
  if (hints_) Hint(pages, Ns(start_s));
  // Layer by layer: the layer's kernels wait for its pages, then compute.
  const uint64_t per_layer = compute_ns / layers_.size();
  for (const RegionPtr& l : layers_) {
    driver_.RunUntil(t);
    device_.AdvanceTo(t);
    t = std::max(t, device_.Touch(*l, pages.data(), pages.size())) + per_layer;
  }
  t += compute_ns - per_layer * layers_.size();
  if (device_.residency_epoch() == epoch0) {
    for (Request* r : checked) {
      r->verified_epoch = epoch0;
      r->verified_pages = r->pages.size();
    }
  }
  return t / 1e9;
}

void PagedBackend::RunUntil(double t) {
  const uint64_t ns = Ns(t);
  driver_.RunUntil(ns);
  device_.AdvanceTo(ns);
}

Occupancy PagedBackend::Sample(double t) const {
  Occupancy o;
  o.t = t;
  o.device = device_.resident_bytes();
  o.host = device_.host_used_bytes();
  o.disk = device_.disk_used_bytes();
  return o;
}

MoveCounters PagedBackend::counters() const {
  const ModelDeviceStats s = device_.stats();
  const TickTotals d = driver_.totals();
  MoveCounters c;
  c.h2d_fault = s.h2d_fault_bytes;
  c.h2d_prefetch = s.h2d_prefetch_bytes;
  c.d2h_demote = s.d2h_demote_bytes;
  c.d2h_evict = s.d2h_evict_bytes;
  c.disk_read = s.disk_read_bytes;
  c.disk_write = s.disk_write_bytes;
  c.faults = s.faults;
  c.driver_evictions = s.driver_evictions;
  c.refaults = d.refaults;
  c.policy_ticks = d.ticks;
  return c;
}

}  // namespace kvtier::bench
