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

void OffloadBackend::Store::Erase(uint64_t key) {
  auto it = where.find(key);
  if (it == where.end()) return;
  lru.erase(it->second);
  where.erase(it);
}

uint64_t OffloadBackend::Store::Insert(uint64_t key) {
  uint64_t evicted = UINT64_MAX;
  if (where.size() >= capacity) {
    evicted = lru.front();
    where.erase(evicted);
    lru.pop_front();
  }
  lru.push_back(key);
  where[key] = std::prev(lru.end());
  return evicted;
}

OffloadBackend::OffloadBackend(const EngineConfig& engine, uint64_t pool_blocks,
                               const OffloadConfig& config)
    : HbmBackend(engine, pool_blocks), config_(config), layers_(engine.shape.layers) {
  cpu_.capacity = static_cast<uint64_t>(config.cpu_bytes / engine.block_bytes());
  disk_.capacity = static_cast<uint64_t>(config.disk_bytes / engine.block_bytes());
}

uint64_t OffloadBackend::Key(int session, int index) const {
  const uint32_t owner =
      index < config_.shared_blocks ? 0xffffffffu : static_cast<uint32_t>(session);
  return (uint64_t{owner} << 32) | static_cast<uint32_t>(index);
}

void OffloadBackend::StoreInCpu(uint64_t key) {
  if (cpu_.capacity == 0) return;
  const uint64_t evicted = cpu_.Insert(key);
  // The CPU store's evictions go to the disk store, if there is one.
  if (evicted != UINT64_MAX && disk_.capacity > 0) {
    disk_.Insert(evicted);
    counters_.disk_write += static_cast<uint64_t>(block_bytes_);
  }
}

int OffloadBackend::ExternalHitBlocks(int session, int first, int max, int* on_disk) {
  int n = 0;
  *on_disk = 0;
  while (n < max) {
    const uint64_t key = Key(session, first + n);
    if (cpu_.Has(key)) {
      cpu_.Touch(key);
    } else if (disk_.Has(key)) {
      // Read back through host memory: it is in the CPU store again.
      disk_.Erase(key);
      StoreInCpu(key);
      ++*on_disk;
    } else {
      break;
    }
    ++n;
  }
  return n;
}

void OffloadBackend::OnFinish(const Request& r) {
  // Write-through of every full block not stored yet; the copy runs on the
  // device-to-host direction of the link, off the critical path.
  for (int i = 0; i < r.cached_blocks; ++i) {
    const uint64_t key = Key(r.session, i);
    if (cpu_.Has(key)) {
      cpu_.Touch(key);
      continue;
    }
    if (cpu_.capacity == 0) return;
    disk_.Erase(key);
    StoreInCpu(key);
    counters_.d2h_store += static_cast<uint64_t>(block_bytes_);
  }
}

double OffloadBackend::RunStep(std::vector<Request*>& batch, double start_s, double overhead_s,
                               double compute_s) {
  double copy_bytes = 0, disk_bytes = 0;
  for (Request* r : batch) {
    copy_bytes += r->pending_load_blocks * block_bytes_;
    disk_bytes += r->pending_disk_blocks * block_bytes_;
  }
  counters_.h2d_load += static_cast<uint64_t>(copy_bytes);
  counters_.disk_read += static_cast<uint64_t>(disk_bytes);
  // Synchronous: the step waits for the SSD reads, then for the copies.
  const double disk_s = config_.ssd_read_bps > 0 ? disk_bytes / config_.ssd_read_bps : 0;
  const double copy_s = copy_bytes / config_.link_bps;
  if (!config_.layerwise || copy_s == 0) return start_s + disk_s + copy_s + overhead_s + compute_s;
  // Layer l+1's copy overlaps layer l's compute: a two-stage pipeline.
  const double load = copy_s / layers_, comp = compute_s / layers_;
  return start_s + disk_s + overhead_s + load + comp + (layers_ - 1) * std::max(load, comp);
}

Occupancy OffloadBackend::Sample(double t) const {
  Occupancy o = HbmBackend::Sample(t);
  o.host = static_cast<uint64_t>(cpu_.where.size() * block_bytes_);
  o.disk = static_cast<uint64_t>(disk_.where.size() * block_bytes_);
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
  driver_.WakeSoon(t_ns);  // as Runtime::Hint asks for an early tick
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
