// CostAwarePolicy: GreedyDual-Size-Frequency (see cost_aware.h).
#include "policies/cost_aware.h"

#include <algorithm>

#include "runtime/signal_apply.h"

namespace kvtier {

namespace {

constexpr double kFaultBlockBytes = 2 << 20;  // the UVM VA block

}  // namespace

double CostAwarePolicy::HostRestoreNs(const Region& region, uint32_t page) const {
  // The fault latency is per VA block: a smaller page bears its share.
  const double share = std::min(1.0, static_cast<double>(region.page_size) / kFaultBlockBytes);
  return costs_.host_ns_per_byte * region.PageBytes(page) + costs_.host_latency_ns * share;
}

double CostAwarePolicy::RecomputeNs(const Region& region, uint32_t page) const {
  return costs_.recompute_ns_per_byte * region.PageBytes(page);
}

bool CostAwarePolicy::MaySpill(const Region& region, uint32_t page) const {
  double disk = costs_.disk_ns_per_byte * region.PageBytes(page) + costs_.disk_latency_ns;
  return disk < RecomputeNs(region, page);
}

void CostAwarePolicy::Rank(const Region& region, uint32_t page, uint32_t now) {
  const PageRecord& rec = region.pages[page];
  const double freq = std::max(1u, DecayedHeat(rec, now) / kHeatStep);
  const double cost = HostRestoreNs(region, page) * (1.0 + rec.refaults);
  State& st = state_.At(region, page);
  if (st.version == 0) ++ranked_;
  ++st.version;
  st.h = inflation_ + freq * cost;
  heap_.push({st.h, seq_++, PageKey(region.id, page), st.version});
  if (heap_.size() > 4 * ranked_ + 4096) {  // drop stale entries
    std::vector<Entry> live;
    while (!heap_.empty()) {
      Entry e = heap_.top();
      heap_.pop();
      State* s = state_.Find(KeyRegion(e.key), KeyPage(e.key));
      if (s && s->version == e.version) live.push_back(e);
    }
    for (const Entry& e : live) heap_.push(e);
  }
}

void CostAwarePolicy::OnResident(const Region& region, uint32_t page, Tier, uint32_t now) {
  Rank(region, page, now);
}

void CostAwarePolicy::OnAccess(const Region& region, uint32_t page, uint32_t now) {
  if (region.pages[page].tier.load(std::memory_order_relaxed) == Tier::kDevice) {
    Rank(region, page, now);
  }
}

void CostAwarePolicy::PickVictims(const PolicyView& view, uint64_t bytes, bool protect,
                                  std::vector<PageRef>* out) {
  RegionIndex index;
  index.Build(*view.regions);
  uint64_t covered = 0;
  std::vector<Entry> held;  // resident but not demotable now: ranked again after
  while (covered < bytes && !heap_.empty()) {
    Entry e = heap_.top();
    heap_.pop();
    Region* r = index.Find(KeyRegion(e.key));
    const uint32_t page = KeyPage(e.key);
    State* st = state_.Find(KeyRegion(e.key), page);
    if (!r || !st || st->version != e.version || page >= r->pages.size()) continue;
    const PageRecord& rec = r->pages[page];
    if (rec.tier.load(std::memory_order_relaxed) != Tier::kDevice) {
      st->version = 0;  // gone from the device: unranked until it returns
      --ranked_;
      continue;
    }
    const bool keep = protect && HostRestoreNs(*r, page) >= RecomputeNs(*r, page);
    if (keep || !Eligible(*r, page, view.now, protect)) {
      held.push_back(e);
      continue;
    }
    inflation_ = std::max(inflation_, e.h);
    st->version = 0;
    --ranked_;
    out->push_back({r, page});
    covered += r->page_size;
  }
  for (const Entry& e : held) heap_.push(e);
}

}  // namespace kvtier
