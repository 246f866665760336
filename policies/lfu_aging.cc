// LfuAgingPolicy: coldest by decayed heat (see lfu_aging.h).
#include "policies/lfu_aging.h"

#include <algorithm>

#include "runtime/signal_apply.h"

namespace kvtier {

void LfuAgingPolicy::OnResident(const Region& region, uint32_t page, Tier from, uint32_t now) {
  arrived_.At(region, page) = now;
}

uint32_t LfuAgingPolicy::LastUse(const Region& region, uint32_t page) const {
  const uint32_t* arrived = arrived_.Find(region.id, page);
  return std::max(region.pages[page].last_access, arrived ? *arrived : 0u);
}

uint32_t LfuAgingPolicy::Heat(const PageRecord& rec, uint32_t arrived, uint32_t now) const {
  uint32_t heat = DecayedHeat(rec, now);
  if (arrived > rec.last_access) {  // promoted since its last signal
    const uint32_t halvings = (now - arrived) / kHeatDecayTicks;
    heat += halvings >= 32 ? 0 : kHeatStep >> halvings;
  }
  return heat;
}

void LfuAgingPolicy::PickVictims(const PolicyView& view, uint64_t bytes, bool protect,
                                 std::vector<PageRef>* out) {
  struct Ranked {
    uint32_t heat;
    uint32_t last_access;
    PageRef ref;
  };
  std::vector<Ranked> ranked;
  uint64_t page_size = 0;
  for (const RegionPtr& r : *view.regions) {
    for (uint32_t p = 0; p < r->pages.size(); ++p) {
      const PageRecord& rec = r->pages[p];
      if (!Eligible(*r, p, view.now, protect)) continue;
      const uint32_t* arrived = arrived_.Find(r->id, p);
      const uint32_t at = arrived ? *arrived : 0;
      ranked.push_back({Heat(rec, at, view.now), std::max(rec.last_access, at), {r.get(), p}});
      page_size = std::max<uint64_t>(page_size, r->page_size);
    }
  }
  if (ranked.empty()) return;
  auto colder = [](const Ranked& a, const Ranked& b) {
    if (a.heat != b.heat) return a.heat < b.heat;
    return a.last_access < b.last_access;
  };
  size_t n = std::min(ranked.size(), static_cast<size_t>((bytes + page_size - 1) / page_size));
  if (n < ranked.size()) std::nth_element(ranked.begin(), ranked.begin() + n, ranked.end(), colder);
  std::sort(ranked.begin(), ranked.begin() + n, colder);
  uint64_t covered = 0;
  for (size_t i = 0; i < ranked.size() && covered < bytes; ++i) {
    out->push_back(ranked[i].ref);
    covered += ranked[i].ref.region->page_size;
  }
}

}  // namespace kvtier
