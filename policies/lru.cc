// LruPolicy and the shared policy building blocks (see lru.h).
#include "policies/lru.h"

#include <algorithm>

namespace kvtier {

std::vector<PageRef> MovablePages(const PolicyView& view, Tier tier) {
  std::vector<PageRef> out;
  for (const RegionPtr& r : *view.regions) {
    for (uint32_t p = 0; p < r->pages.size(); ++p) {
      const PageRecord& rec = r->pages[p];
      if (rec.tier.load(std::memory_order_relaxed) != tier) continue;
      if (rec.flags.load(std::memory_order_relaxed) & (kPagePinned | kPageInFlight)) continue;
      out.push_back({r.get(), p});
    }
  }
  return out;
}

uint64_t EmitMoves(const std::vector<PageRef>& pages, Tier to, uint64_t bytes_to_free,
                   Decisions* out) {
  uint64_t covered = 0;
  for (const PageRef& ref : pages) {
    if (covered >= bytes_to_free) break;
    out->moves.push_back({ref.region->id, ref.page, to});
    covered += ref.region->page_size;
  }
  return covered;
}

uint64_t BytesOverWatermark(const TierUsage& usage) {
  if (usage.budget == 0 || usage.used <= usage.high) return 0;
  return usage.used > usage.low ? usage.used - usage.low : 0;
}

namespace {

// Oldest access first; among equals, the page migrated longest ago.
void SortColdestFirst(std::vector<PageRef>* pages) {
  std::stable_sort(pages->begin(), pages->end(), [](const PageRef& a, const PageRef& b) {
    const PageRecord& ra = a.region->pages[a.page];
    const PageRecord& rb = b.region->pages[b.page];
    if (ra.last_access != rb.last_access) return ra.last_access < rb.last_access;
    return ra.last_move < rb.last_move;
  });
}

}  // namespace

void LruPolicy::OnSignal(const Signal& signal, const Region& region) {
  if (signal.kind == SignalKind::kWillNeed) hints_pending_ = true;
}

void LruPolicy::Decide(const PolicyView& view, Decisions* out) {
  uint64_t device_used = view.device().used;
  if (uint64_t excess = BytesOverWatermark(view.device())) {
    std::vector<PageRef> pages = MovablePages(view, Tier::kDevice);
    SortColdestFirst(&pages);
    device_used -= EmitMoves(pages, Tier::kHost, excess, out);
  }

  if (view.disk().budget > 0) {
    if (uint64_t excess = BytesOverWatermark(view.host())) {
      uint64_t disk_room = view.disk().budget > view.disk().used ? view.disk().budget - view.disk().used : 0;
      std::vector<PageRef> pages = MovablePages(view, Tier::kHost);
      SortColdestFirst(&pages);
      EmitMoves(pages, Tier::kDisk, std::min(excess, disk_room), out);
    }
  }

  // Prefetch hinted pages while the device stays below its high watermark.
  if (!hints_pending_) return;
  for (const RegionPtr& r : *view.regions) {
    for (uint32_t p = 0; p < r->pages.size(); ++p) {
      const PageRecord& rec = r->pages[p];
      if (!(rec.flags.load(std::memory_order_relaxed) & kPageWillNeed)) continue;
      if (rec.tier.load(std::memory_order_relaxed) == Tier::kDevice) continue;
      if (device_used + r->page_size > view.device().high) return;  // more wait for room
      out->moves.push_back({r->id, p, Tier::kDevice});
      device_used += r->page_size;
    }
  }
  hints_pending_ = false;  // every hinted page is on its way
}

}  // namespace kvtier
