// LruPolicy (see lru.h).
#include "policies/lru.h"

#include <algorithm>

#include "policies/policy_util.h"

namespace kvtier {

namespace {

constexpr uint8_t kUnmovable = kPagePinned | kPageInFlight;

// Oldest access first; among equals, the page migrated longest ago.
void SortColdestFirst(std::vector<PageRef>* pages) {
  std::stable_sort(pages->begin(), pages->end(), [](const PageRef& a, const PageRef& b) {
    const PageRecord& ra = a.region->pages[a.page];
    const PageRecord& rb = b.region->pages[b.page];
    if (ra.last_access != rb.last_access) return ra.last_access < rb.last_access;
    return ra.last_move < rb.last_move;
  });
}

Tier TierOf(const Region& r, uint32_t page) {
  return r.pages[page].tier.load(std::memory_order_relaxed);
}

}  // namespace

void LruPolicy::OnSignal(const Signal& signal, const Region& region) {
  const uint64_t size = region.pages.size();
  if (signal.page >= size) return;
  const uint32_t end =
      static_cast<uint32_t>(std::min<uint64_t>(uint64_t{signal.page} + signal.pages, size));
  for (uint32_t p = signal.page; p < end; ++p) {
    const Entry e{region.id, p, region.pages[p].last_access};
    switch (signal.kind) {
      case SignalKind::kFault:
      case SignalKind::kAccess:
        device_.push_back(e);
        break;
      case SignalKind::kWillNeed:
        device_.push_back(e);
        hinted_.push_back(e);
        break;
      case SignalKind::kCold:
        cold_.push_back(e);
        break;
      case SignalKind::kEvicted:
        host_.push_back(e);
        break;
      default:
        break;
    }
  }
}

void LruPolicy::Seed(const PolicyView& view) {
  std::vector<PageRef> on_device, on_host;
  for (const RegionPtr& r : *view.regions) {
    if (!seen_.insert(r->id).second) continue;
    for (uint32_t p = 0; p < r->pages.size(); ++p) {
      const Tier t = TierOf(*r, p);
      if (t == Tier::kDevice) on_device.push_back({r.get(), p});
      if (t == Tier::kHost) on_host.push_back({r.get(), p});
    }
  }
  if (on_device.empty() && on_host.empty()) return;
  SortColdestFirst(&on_device);
  SortColdestFirst(&on_host);
  // Seeded pages are older than anything queued since: they go in front.
  for (auto it = on_device.rbegin(); it != on_device.rend(); ++it) {
    device_.push_front({it->region->id, it->page, it->region->pages[it->page].last_access});
  }
  for (auto it = on_host.rbegin(); it != on_host.rend(); ++it) {
    host_.push_front({it->region->id, it->page, 0});
  }
}

template <typename Current>
uint64_t LruPolicy::Drain(std::deque<Entry>* q, Tier from, Tier to, uint64_t bytes, Decisions* out,
                          Current&& current) {
  uint64_t covered = 0;
  std::vector<Entry> unmovable;  // pinned or on their way: candidates still
  while (covered < bytes && !q->empty()) {
    const Entry e = q->front();
    q->pop_front();
    Region* r = Find(e.region);
    if (!r || e.page >= r->pages.size() || TierOf(*r, e.page) != from) continue;
    const PageRecord& rec = r->pages[e.page];
    if (!current(e, rec)) continue;
    if ((rec.flags.load(std::memory_order_relaxed) & kUnmovable) ||
        (to == Tier::kDisk && !MaySpill(*r, rec))) {
      unmovable.push_back(e);
      continue;
    }
    out->moves.push_back({r->id, e.page, to});
    if (to == Tier::kHost) host_.push_back({r->id, e.page, 0});
    covered += r->page_size;
  }
  for (auto it = unmovable.rbegin(); it != unmovable.rend(); ++it) q->push_front(*it);
  return covered;
}

Region* LruPolicy::Find(RegionId id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : it->second;
}

bool LruPolicy::LiveOnDevice(const Entry& e) const {
  const Region* r = Find(e.region);
  if (!r || e.page >= r->pages.size()) return false;
  const PageRecord& rec = r->pages[e.page];
  return TierOf(*r, e.page) == Tier::kDevice && rec.last_access == e.stamp;
}

void LruPolicy::Compact() {
  if (device_.size() + host_.size() + cold_.size() < compact_at_) return;
  std::erase_if(device_, [&](const Entry& e) { return !LiveOnDevice(e); });
  std::erase_if(cold_, [&](const Entry& e) { return !LiveOnDevice(e); });
  std::erase_if(host_, [&](const Entry& e) {
    const Region* r = Find(e.region);
    return !r || e.page >= r->pages.size() || TierOf(*r, e.page) != Tier::kHost;
  });
  compact_at_ = std::max<size_t>(1 << 16, 2 * (device_.size() + host_.size() + cold_.size()));
}

void LruPolicy::Decide(const PolicyView& view, Decisions* out) {
  by_id_.clear();
  for (const RegionPtr& r : *view.regions) by_id_[r->id] = r.get();
  Seed(view);
  Compact();
  // Moves within what the mover carries out this tick: the rest stay queued
  // here, not with the mover, which would sort an ever longer backlog.
  uint64_t device_used = view.device().used;
  if (uint64_t excess = std::min(BytesOverWatermark(view.device()), view.budget.down)) {
    uint64_t covered = 0;
    for (std::deque<Entry>* q : {&cold_, &device_}) {
      const bool cold = q == &cold_;
      covered += Drain(q, Tier::kDevice, Tier::kHost, excess - std::min(excess, covered), out,
                       [&](const Entry& e, const PageRecord& rec) {
                         // Accessed since it was queued: a later entry stands for it.
                         return cold ? rec.last_access == 0 : rec.last_access == e.stamp;
                       });
    }
    device_used -= std::min(device_used, covered);
  }

  if (view.disk().budget > 0) {
    if (uint64_t excess = BytesOverWatermark(view.host())) {
      const uint64_t disk_room =
          view.disk().budget > view.disk().used ? view.disk().budget - view.disk().used : 0;
      Drain(&host_, Tier::kHost, Tier::kDisk, std::min({excess, disk_room, view.budget.spill}), out,
            [](const Entry&, const PageRecord&) { return true; });
    }
  }

  // Prefetch hinted pages while the device stays below its high watermark.
  uint64_t up = 0;
  while (!hinted_.empty()) {
    const Entry e = hinted_.front();
    Region* r = Find(e.region);
    if (r && e.page < r->pages.size()) {
      const PageRecord& rec = r->pages[e.page];
      if ((rec.flags.load(std::memory_order_relaxed) & kPageWillNeed) &&
          TierOf(*r, e.page) != Tier::kDevice) {
        if (device_used + r->page_size > view.device().high) return;  // more wait for room
        if (up + r->page_size > view.budget.up) return;               // the rest next tick
        up += r->page_size;
        out->moves.push_back({r->id, e.page, Tier::kDevice});
        device_.push_back({r->id, e.page, rec.last_access});
        device_used += r->page_size;
      }
    }
    hinted_.pop_front();
  }
}

}  // namespace kvtier
