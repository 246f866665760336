// Building blocks the policies share: which pages may move, how many bytes
// a tier must shed, and the pace of a scan of every page.
// Thread-safety: pure functions of the view, and ScanBackoff on the policy
// thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "runtime/policy.h"

namespace kvtier {

// Bytes that must leave a tier: used - low once used passes high, else 0.
uint64_t BytesOverWatermark(const TierUsage& usage);

// A host page that may go to disk now: neither pinned nor in flight, and the
// backend's MaySpill.
inline bool SpillableNow(const Region& r, uint32_t page) {
  const PageRecord& rec = r.pages[page];
  return rec.tier.load(std::memory_order_relaxed) == Tier::kHost &&
         !(rec.flags.load(std::memory_order_relaxed) & (kPagePinned | kPageInFlight)) &&
         MaySpill(r, rec);
}

// Host pages that may go to disk now (SpillableNow, and `keep(region,
// page)`), least recently used first,
// as many as cover `bytes` (all of them if they do not): one pass over every
// page, then a partial sort of those that qualify, so a tier whose pages
// mostly may not spill costs no sort of them all.
template <typename Keep>
std::vector<PageRef> OldestSpillable(const PolicyView& view, uint64_t bytes, Keep&& keep) {
  std::vector<PageRef> out;
  uint64_t smallest = 0;
  for (const RegionPtr& r : *view.regions) {
    for (uint32_t p = 0; p < r->pages.size(); ++p) {
      if (!SpillableNow(*r, p) || !keep(*r, p)) continue;
      out.push_back({r.get(), p});
      if (smallest == 0 || r->page_size < smallest) smallest = r->page_size;
    }
  }
  if (out.empty()) return out;
  const size_t k = static_cast<size_t>(std::min<uint64_t>(out.size(), bytes / smallest + 1));
  std::partial_sort(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(k), out.end(),
                    [](const PageRef& a, const PageRef& b) {
                      return a.region->pages[a.page].last_access <
                             b.region->pages[b.page].last_access;
                    });
  out.resize(k);
  return out;
}

// Paces a last-resort scan of every page (O(pages), where a tick should cost
// O(signals + moves)): after a scan that found less than it wanted (what is
// left may not move, e.g. a spill gate says no), the next waits 1, 2, 4, ...
// ticks, up to kMaxTicks; a scan that found enough brings it back to every
// tick.
class ScanBackoff {
 public:
  static constexpr uint32_t kMaxTicks = 1024;
  bool Due(uint32_t now) const { return now >= not_before_; }
  void Scanned(uint32_t now, bool found_enough) {
    if (found_enough) {
      wait_ = 1;
      not_before_ = 0;
      return;
    }
    not_before_ = now + wait_;
    wait_ = std::min(wait_ * 2, kMaxTicks);
  }

 private:
  uint32_t wait_ = 1;
  uint32_t not_before_ = 0;
};

}  // namespace kvtier
