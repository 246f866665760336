// TieringPolicy: the shared tick loop (see tiering_policy.h).
#include "policies/tiering_policy.h"

#include <algorithm>
#include <limits>
#include <unordered_set>

#include "policies/policy_util.h"
#include "runtime/signal_apply.h"

namespace kvtier {
namespace {
constexpr uint64_t kUnseenScan = 1 << 16;  // pages one call looks at, at most
}  // namespace

bool TieringPolicy::Eligible(const Region& region, uint32_t page, uint32_t now,
                             bool protect) const {
  const PageRecord& rec = region.pages[page];
  if (rec.tier.load(std::memory_order_relaxed) != Tier::kDevice) return false;
  if (rec.flags.load(std::memory_order_relaxed) & (kPagePinned | kPageInFlight)) return false;
  if (protect && options_.refault_protection) {
    const Protection* p = protection_.Find(region.id, page);
    if (p && now < p->until) return false;
  }
  return true;
}

void TieringPolicy::OnSignal(const Signal& s, const Region& region) {
  const uint64_t size = region.pages.size();
  if (s.page >= size) return;
  const uint32_t end = static_cast<uint32_t>(std::min<uint64_t>(uint64_t{s.page} + s.pages, size));
  for (uint32_t p = s.page; p < end; ++p) {
    // ApplySignal ran first, so last_access is the current tick.
    const uint32_t now = region.pages[p].last_access;
    switch (s.kind) {
      case SignalKind::kFault: {
        // ApplySignal counts a refault; protect the page for a while after it.
        const uint16_t refaults = region.pages[p].refaults;
        if (refaults > 0) {
          Protection& prot = protection_.At(region, p);
          if (refaults != prot.refaults_seen) prot.until = now + options_.protect_ticks;
          prot.refaults_seen = refaults;
        }
        OnResident(region, p, s.from, now);
        prefetchers_.OnFault(region, p, s.from);
        break;
      }
      case SignalKind::kWillNeed:
        queue_.Add(region.id, p, now, true);
        OnAccess(region, p, now);
        break;
      case SignalKind::kAccess:
        OnAccess(region, p, now);
        break;
      default:
        break;
    }
  }
}

std::vector<PageRef> TieringPolicy::TakeVictims(const PolicyView& view, uint64_t bytes,
                                                uint64_t hard) {
  std::vector<PageRef> out;
  uint64_t covered = 0;
  auto consume = [&] {
    while (covered < bytes && !reserve_.empty()) {
      Reserved r = reserve_.front();
      reserve_.pop_front();
      if (LastUse(*r.ref.region, r.ref.page) != r.last_use ||
          !Eligible(*r.ref.region, r.ref.page, view.now, r.protect)) {
        continue;
      }
      out.push_back(r.ref);
      covered += r.ref.region->page_size;
    }
  };
  consume();
  if (covered >= bytes) return out;
  // Pick what is missing (for a batch ranking, the watermark band if larger).
  const TierUsage& dev = view.device();
  const uint64_t band = dev.high > dev.low ? dev.high - dev.low : 0;
  const uint64_t missing = bytes - covered;
  const uint64_t want = BatchVictims() ? std::max(missing, band) : missing;
  reserve_.clear();
  std::vector<PageRef> picked;
  PickVictims(view, want, true, &picked);
  uint64_t got = 0;
  for (const PageRef& p : picked) got += p.region->page_size;
  std::unordered_set<uint64_t> seen;
  for (const PageRef& p : picked) seen.insert(PageKey(p.region->id, p.page));
  // Pages the ranking never saw (resident before the policy did), in page
  // order, from where the last scan stopped: at most kUnseenScan pages a call
  // (the rest at later ticks), so a tick never walks every page.
  auto unseen = [&](uint64_t limit, bool protect) {
    const std::vector<RegionPtr>& regions = *view.regions;
    if (regions.empty()) return;
    size_t ri = 0;
    while (ri < regions.size() && regions[ri]->id != unseen_region_) ++ri;
    if (ri == regions.size()) {  // first scan, or that region is gone
      ri = 0;
      unseen_page_ = 0;
    }
    uint64_t looked = 0;
    for (size_t wrapped = 0; wrapped <= regions.size() && got < limit && looked < kUnseenScan;) {
      const Region& r = *regions[ri];
      for (; unseen_page_ < r.pages.size() && got < limit && looked < kUnseenScan; ++unseen_page_) {
        ++looked;
        if (!Eligible(r, unseen_page_, view.now, protect)) continue;
        if (!seen.insert(PageKey(r.id, unseen_page_)).second) continue;
        picked.push_back({regions[ri].get(), unseen_page_});
        got += r.page_size;
      }
      if (unseen_page_ < r.pages.size()) break;  // stopped inside this region
      ri = (ri + 1) % regions.size();
      unseen_page_ = 0;
      ++wrapped;
    }
    unseen_region_ = regions[ri]->id;
  };
  if (got < missing) unseen(missing, true);
  const size_t protected_picks = picked.size();
  // Refault-protected pages only as a last resort, to get under the high watermark.
  const uint64_t hard_missing = hard > covered ? std::min(hard - covered, missing) : 0;
  if (got < hard_missing) {
    std::vector<PageRef> more;
    PickVictims(view, hard_missing - got, false, &more);
    for (const PageRef& p : more) {
      if (seen.insert(PageKey(p.region->id, p.page)).second) {
        picked.push_back(p);
        got += p.region->page_size;
      }
    }
    unseen(hard_missing, false);
  }
  for (size_t i = 0; i < picked.size(); ++i) {
    const PageRef& p = picked[i];
    reserve_.push_back({p, LastUse(*p.region, p.page), i < protected_picks});
  }
  consume();
  return out;
}

void TieringPolicy::Spill(const PolicyView& view, uint64_t budget, Decisions* out) {
  const TierUsage& host = view.host();
  const TierUsage& disk = view.disk();
  if (disk.budget == 0 || host.budget == 0 || host.used <= host.high) return;
  uint64_t want = std::min(host.used - host.low, budget);
  want = std::min(want, disk.budget > disk.used ? disk.budget - disk.used : 0);
  uint64_t covered = 0;
  auto spillable = [&](const Region& r, uint32_t page) {
    return SpillableNow(r, page) && MaySpill(r, page);
  };
  while (covered < want && !demoted_.empty()) {
    uint64_t key = demoted_.front();
    demoted_.pop_front();
    Region* r = index_.Find(KeyRegion(key));
    if (!r || KeyPage(key) >= r->pages.size() || !spillable(*r, KeyPage(key))) continue;
    out->moves.push_back({r->id, KeyPage(key), Tier::kDisk});
    covered += r->page_size;
  }
  if (covered >= want || !spill_scan_.Due(view.now)) return;
  // Host pages this policy did not demote (driver evictions): oldest first.
  // A scan of every page: paced when it finds too little (see spill_scan_).
  const auto mine = [this](const Region& r, uint32_t page) { return MaySpill(r, page); };
  for (const PageRef& p : OldestSpillable(view, want - covered, mine)) {
    if (covered >= want) break;
    out->moves.push_back({p.region->id, p.page, Tier::kDisk});
    covered += p.region->page_size;
  }
  spill_scan_.Scanned(view.now, covered >= want);
}

void TieringPolicy::Decide(const PolicyView& view, Decisions* out) {
  const uint32_t now = view.now;
  index_.Build(*view.regions);
  prefetchers_.Expand(index_, now, &queue_);

  const TierUsage& dev = view.device();
  const TierUsage& host = view.host();
  const uint64_t used = dev.used;
  const uint64_t up_budget = view.budget.up;
  const uint64_t down_budget = view.budget.down;
  // Must leave the device regardless of prefetching.
  const uint64_t must_free = (dev.budget && used > dev.high) ? used - dev.low : 0;
  // Demotions need room on the host; a promotion out of the host leaves its
  // room to a demotion (a swap).
  const uint64_t host_room = host.budget == 0          ? std::numeric_limits<uint64_t>::max()
                             : host.budget > host.used ? host.budget - host.used
                                                       : 0;
  auto sat_add = [](uint64_t a, uint64_t b) {
    return a > std::numeric_limits<uint64_t>::max() - b ? std::numeric_limits<uint64_t>::max()
                                                        : a + b;
  };

  // Plan promotions within the up budget. Victims make them room: enough to
  // keep the device under its high watermark, as many as the host (with the
  // room the promotions leave there) and the down budget take. A promotion
  // that would grow the device past max(high, used) after those victims
  // waits; one that trades places with a victim on a full device goes.
  std::vector<PageRef> promote;
  uint64_t promote_bytes = 0;
  uint64_t from_host = 0;  // host bytes the promotions free
  const uint64_t ceiling = std::max(dev.high, used);
  auto victims_for = [&](uint64_t promoted, uint64_t room) {
    const uint64_t after = used + promoted;
    const uint64_t need = std::max(must_free, after > dev.high ? after - dev.high : 0);
    return std::min({need, room, down_budget});
  };
  if (dev.budget) {
    queue_.Take(index_, now, [&](const PageRef& ref) {
      const uint64_t b = ref.region->page_size;
      const bool on_host =
          ref.region->pages[ref.page].tier.load(std::memory_order_relaxed) == Tier::kHost;
      const uint64_t room = sat_add(host_room, from_host + (on_host ? b : 0));
      const uint64_t after = used + promote_bytes + b;
      if (promote_bytes + b > up_budget || after > ceiling + victims_for(promote_bytes + b, room)) {
        return false;
      }
      promote.push_back(ref);
      promote_bytes += b;
      if (on_host) from_host += b;
      return true;
    });
  }
  const uint64_t room = sat_add(host_room, from_host);
  const uint64_t need_free = dev.budget ? victims_for(promote_bytes, room) : 0;

  std::vector<PageRef> victims;
  uint64_t freed = 0;
  if (need_free > 0) {
    const uint64_t over_high = dev.budget && used > dev.high ? used - dev.high : 0;
    victims = TakeVictims(view, std::min(need_free, room), std::min(over_high, room));
    for (const PageRef& v : victims) freed += v.region->page_size;
  }
  // Without enough victims, promote only what fits under the ceiling.
  while (!promote.empty() && used + promote_bytes > ceiling + freed) {
    const PageRef& last = promote.back();
    const bool hinted =
        last.region->pages[last.page].flags.load(std::memory_order_relaxed) & kPageWillNeed;
    queue_.Add(last.region->id, last.page, now, hinted);
    promote_bytes -= last.region->page_size;
    promote.pop_back();
  }

  // Promotions into free device room go alone; each one beyond it takes a
  // victim with it (kRoom, executed just before it).
  uint64_t free_room = dev.budget > used ? dev.budget - used : 0;
  size_t next_victim = 0;
  auto emit_victim = [&](const PageRef& v, MoveClass why) {
    out->moves.push_back({v.region->id, v.page, Tier::kHost, why});
    OnDemote(*v.region, v.page);
    demoted_.push_back(PageKey(v.region->id, v.page));
  };
  for (const PageRef& p : promote) {
    const uint64_t b = p.region->page_size;
    if (free_room >= b) {
      free_room -= b;
    } else if (next_victim < victims.size()) {
      emit_victim(victims[next_victim++], MoveClass::kRoom);
    }
    out->moves.push_back({p.region->id, p.page, Tier::kDevice, MoveClass::kDemand});
    OnResident(*p.region, p.page, p.region->pages[p.page].tier.load(std::memory_order_relaxed),
               now);
  }
  for (; next_victim < victims.size(); ++next_victim) {
    emit_victim(victims[next_victim], MoveClass::kDemote);
  }
  if (demoted_.size() > (1u << 22)) demoted_.erase(demoted_.begin(), demoted_.begin() + (1u << 20));
  Spill(view, view.budget.spill, out);
}

}  // namespace kvtier
