// Building blocks the policies share (see policy_util.h).
#include "policies/policy_util.h"

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

uint64_t BytesOverWatermark(const TierUsage& usage) {
  if (usage.budget == 0 || usage.used <= usage.high) return 0;
  return usage.used > usage.low ? usage.used - usage.low : 0;
}

}  // namespace kvtier
