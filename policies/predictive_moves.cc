// PredictivePolicy: the moves it plans (see predictive.h): promotions with
// their victims, demotions, spills, and the budgets they take.
#include <algorithm>
#include <limits>

#include "policies/policy_util.h"
#include "policies/predictive.h"

namespace kvtier {

bool PredictivePolicy::CanDemote(const Plan& plan, uint64_t bytes) const {
  const TierUsage& host = plan.view.host();
  if ((plan.demand ? plan.demand_down_left : plan.down_left) < bytes) return false;
  // An urgent demotion (a swap's room, or the device about to fill) goes even
  // past the host budget: otherwise the driver evicts a page there itself,
  // blindly and while a kernel waits; spills take the host back under it.
  return plan.demand || host.budget == 0 || plan.host_used + bytes <= host.budget;
}

bool PredictivePolicy::DemoteUnclaimed(Plan& plan, MoveClass why, bool unwritten_too) {
  while (!ahead_.empty()) {
    const uint64_t slot = ahead_.front();
    if (!unwritten_too && !ahead_.HandedOut(slot)) return false;
    Region* head = groups_.GroupOf(slot) == kNoGroup ? index_.Find(KeyRegion(slot)) : nullptr;
    const std::vector<Region*>* layers = head ? &index_.Siblings(head->size) : nullptr;
    const uint32_t page = KeyPage(slot);
    uint32_t& layer = ahead_.front_layer();
    for (; layers && layer < layers->size(); ++layer) {
      const Region& r = *(*layers)[layer];
      if (page >= r.pages.size() || TierOf(r, page) != Tier::kDevice || !Movable(r.pages[page])) {
        continue;
      }
      if (!CanDemote(plan, r.page_size)) return false;
      PlanDemotion(plan, r, page, why);
      ++layer;
      return true;
    }
    ahead_.PopFront();  // claimed by a group, gone, or reclaimed in every layer
  }
  return false;
}

PredictivePolicy::Next PredictivePolicy::DemoteNext(Plan& plan, GroupId g, Cursor& c, MoveClass why,
                                                    bool in_use) {
  bool demoted = false, blocked = false;
  const bool done = Walk(g, Order::kSlotMajor, c, [&](const Region& r, uint32_t page, bool) {
    const PageRecord& rec = r.pages[page];
    if (in_use) {
      if (plan.squeeze_scan_left == 0) {
        blocked = true;
        return false;
      }
      --plan.squeeze_scan_left;
      // Brought in lately (a fault, a first touch, a promotion): the engine
      // is reading it now. The device's own eviction takes the page that
      // arrived least recently, not this one.
      if (plan.now - rec.last_move < kSqueezeRecentTicks) return true;
    }
    if (TierOf(r, page) != Tier::kDevice) return true;
    if (!Movable(rec)) {  // pinned, or on its way: the group is not all away
      if (!in_use) place_[g].left_behind = true;
      return true;
    }
    if (!CanDemote(plan, r.page_size)) {
      blocked = true;
      return false;
    }
    PlanDemotion(plan, r, page, why);
    demoted = true;
    return false;  // one page; the cursor stays past it
  });
  if (demoted) {
    ++c.layer;  // past the page demoted (slot-major: next layer)
    return Next::kDemoted;
  }
  return done ? Next::kDone : Next::kBlocked;
}

bool PredictivePolicy::DemoteOne(Plan& plan, MoveClass why) {
  if (!plan.prefetching && evicting_ == kNoGroup && DemoteUnclaimed(plan, why, false)) return true;
  for (;;) {
    if (evicting_ != kNoGroup && groups_.Alive(evicting_)) {
      const Next next = DemoteNext(plan, evicting_, place_[evicting_].cursor, why, false);
      if (next == Next::kDemoted) return true;
      if (next == Next::kBlocked) return false;
      // Pages it could not move keep it among the device's groups, to be
      // picked again once they can go.
      if (place_[evicting_].left_behind) Rank(evicting_, Where::kDevice, plan.now);
      evicting_ = kNoGroup;
    }
    evicting_ = PickVictim(dev_trusted_, dev_lru_, plan.now, plan.prefetching, plan.due, false,
                           plan.desperate);
    if (evicting_ == kNoGroup) return !plan.prefetching && DemoteUnclaimed(plan, why, true);
    // A group walked through once this tick without a page to give (all on
    // their way, or pinned) is not picked again until the next.
    if (std::find(plan.walked.begin(), plan.walked.end(), evicting_) != plan.walked.end()) {
      evicting_ = kNoGroup;
      return false;
    }
    plan.walked.push_back(evicting_);
    Rank(evicting_, Where::kAway, plan.now);
    place_[evicting_].cursor.Reset();
    place_[evicting_].armed = false;
    place_[evicting_].left_behind = false;
  }
}

bool PredictivePolicy::DemoteInUse(Plan& plan) {
  // Oldest evidence first; each group's walk resumes where it stopped, so a
  // group of sessions written one after another gives its oldest first, as
  // the device's own eviction (least recently migrated) would.
  for (const auto& [last, g] : dev_active_) {
    if (g == groups_.shared() || place_[g].queued != 0 || GroupBytes(g) <= device_budget_ ||
        std::find(plan.squeezed.begin(), plan.squeezed.end(), g) != plan.squeezed.end()) {
      continue;
    }
    const Next next = DemoteNext(plan, g, place_[g].squeeze, MoveClass::kDemand, true);
    if (next == Next::kDemoted) return true;
    if (next == Next::kBlocked) return false;
    plan.squeezed.push_back(g);  // nothing more on the device; its walk starts over next time
  }
  return false;
}

void PredictivePolicy::PlanDemotion(Plan& plan, const Region& r, uint32_t page, MoveClass why) {
  plan.out->moves.push_back({r.id, page, Tier::kHost, why});
  plan.down_left -= std::min<uint64_t>(plan.down_left, r.page_size);
  plan.demand_down_left -= std::min<uint64_t>(plan.demand_down_left, r.page_size);
  plan.dev_used -= std::min<uint64_t>(plan.dev_used, r.page_size);
  plan.host_used += r.page_size;
}

PredictivePolicy::Step PredictivePolicy::PromotePage(Plan& plan, const Region& r, uint32_t page,
                                                     MoveClass why, bool populate) {
  const PageRecord& rec = r.pages[page];
  const Tier tier = TierOf(r, page);
  if (tier == Tier::kDevice || (tier == Tier::kUntouched && !populate) || !Movable(rec)) {
    return Step::kDone;
  }
  const uint64_t b = r.page_size;
  const TierUsage& dev = plan.view.device();
  // Populating only saves a population fault: free room below the high
  // watermark only (the room above it is for the engine's faults).
  if (tier == Tier::kUntouched && dev.budget && plan.dev_used + b > dev.high) return Step::kDone;
  plan.demand = why == MoveClass::kDemand;
  if ((plan.demand ? plan.demand_up_left : plan.up_left) < b) return Step::kNoBudget;
  // A page leaving the host gives its room there to its victim.
  const uint64_t host_freed = tier == Tier::kHost ? std::min<uint64_t>(plan.host_used, b) : 0;
  plan.host_used -= host_freed;
  if (dev.budget) {
    // Past the high watermark a victim goes with this promotion, just before
    // it (kRoom), so the mover never carries out one without the other.
    while (plan.dev_used + b > dev.high) {
      if (!DemoteOne(plan, MoveClass::kRoom)) {
        // A free frame past the watermark is for the engine's demand (then
        // demote later), not for a prefetch.
        if (!plan.prefetching && plan.dev_used + b <= dev.budget) break;
        plan.host_used += host_freed;
        return (plan.demand ? plan.demand_down_left : plan.down_left) < b ? Step::kNoBudget
                                                                          : Step::kNoRoom;
      }
    }
  }
  plan.out->moves.push_back({r.id, page, Tier::kDevice, why});
  plan.up_left -= std::min(plan.up_left, b);
  plan.demand_up_left -= std::min(plan.demand_up_left, b);
  plan.dev_used += b;
  return Step::kDone;
}

PredictivePolicy::Step PredictivePolicy::PromoteGroup(Plan& plan, GroupId id, MoveClass why,
                                                      bool leave_marker) {
  Place& p = PlaceOf(id);
  if (p.cursor.begin == 0 && p.cursor.layer == 0 && p.cursor.i == 0) groups_.Compact(id);
  p.spilled = false;
  Step step = Step::kDone;
  Walk(id, Order::kLayerMajor, [&](const Region& r, uint32_t page, bool first) {
    if (leave_marker && first) return true;
    step = PromotePage(plan, r, page, why, false);
    return step == Step::kDone;
  });
  return step;
}

void PredictivePolicy::Demand(Plan& plan) {
  plan.desperate = true;
  struct Reset {
    Plan& p;
    ~Reset() { p.desperate = false; }
  } reset{plan};
  // Hinted pages, then the slots that faulted (every layer), then groups
  // that came back whole.
  while (!hinted_.empty()) {
    const uint64_t key = hinted_.front();
    Region* r = index_.Find(KeyRegion(key));
    if (r && KeyPage(key) < r->pages.size() &&
        PromotePage(plan, *r, KeyPage(key), MoveClass::kDemand, false) == Step::kNoBudget) {
      return;
    }
    hinted_.pop_front();
  }
  while (!demand_slots_.empty()) {
    SlotBatch& b = demand_slots_.front();
    Region* head = b.slots.empty() ? nullptr : index_.Find(KeyRegion(b.slots.front()));
    if (head) {
      const std::vector<Region*>& layers = index_.Siblings(head->size);
      for (; b.layer < layers.size(); ++b.layer, b.i = 0) {
        for (; b.i < b.slots.size(); ++b.i) {
          const Region* r = index_.Find(KeyRegion(b.slots[b.i]));
          if (!r) continue;
          const std::vector<Region*>& mine = index_.Siblings(r->size);
          if (b.layer >= mine.size() || KeyPage(b.slots[b.i]) >= mine[b.layer]->pages.size())
            continue;
          if (PromotePage(plan, *mine[b.layer], KeyPage(b.slots[b.i]), MoveClass::kDemand,
                          b.populate) == Step::kNoBudget) {
            return;
          }
        }
      }
    }
    demand_slots_.pop_front();
  }
  while (!demand_.empty()) {
    const GroupId g = demand_.front();
    if (groups_.Alive(g) && PromoteGroup(plan, g, MoveClass::kDemand, false) == Step::kNoBudget) {
      return;
    }
    // kNoRoom: everything else is in use; the rest faults in when touched.
    if (g < place_.size() && place_[g].queued) --place_[g].queued;
    demand_.pop_front();
  }
}

void PredictivePolicy::Prefetch(Plan& plan) {
  const uint32_t now = plan.now;
  while (plan.up_left > 0) {
    GroupId g = kNoGroup;
    if (!prefetch_.empty()) {
      g = prefetch_.front();
    } else {
      if (away_trusted_.empty()) return;
      const auto [next, candidate] = *away_trusted_.begin();
      AccessGroup& group = groups_.group(candidate);
      const double interval = group.interval > 0 ? group.interval : groups_.population_interval();
      if (next > now + interval) return;
      // Free room below the low watermark takes any candidate; above it a
      // candidate must return sooner, by its own uncertainty, than a group
      // that would leave for it, so two groups never trade places back and
      // forth.
      const uint32_t due = static_cast<uint32_t>(
          std::min<uint64_t>(next + groups_.Slack(group), std::numeric_limits<uint32_t>::max()));
      const uint64_t bytes = GroupBytes(candidate);
      if (TooLargeToMoveWhole(candidate)) return;  // its faults bring what is read
      const bool room = plan.dev_used + bytes <= plan.view.device().low;
      if (!room && PickVictim(dev_trusted_, dev_lru_, now, true, due, false, false) == kNoGroup) {
        return;
      }
      g = candidate;
      prefetch_.push_back(g);
      Place& p = place_[g];
      ++p.queued;
      p.cursor.Reset();
      p.due = due;
      if (evicting_ == g) evicting_ = kNoGroup;
      if (spilling_ == g) spilling_ = kNoGroup;
      Rank(g, Where::kDevice, now);
    }
    Place& p = place_[g];
    plan.prefetching = true;
    plan.due = p.due;
    const Step step =
        groups_.Alive(g) ? PromoteGroup(plan, g, MoveClass::kPrefetch, true) : Step::kDone;
    plan.prefetching = false;
    if (step == Step::kNoBudget) return;
    prefetch_.pop_front();
    if (p.queued) --p.queued;
    if (step == Step::kNoRoom) {
      Rank(g, Where::kAway, now);  // no victim returns later: it waits off the device
      return;
    }
    // Its first page stayed off the device: the group's use faults it.
    if (groups_.Alive(g)) {
      const uint64_t marker = groups_.group(g).slots.front();
      const Region* r = index_.Find(KeyRegion(marker));
      p.armed =
          r && KeyPage(marker) < r->pages.size() && TierOf(*r, KeyPage(marker)) != Tier::kDevice;
      if (p.armed) groups_.SetMarker(g, marker);
    }
  }
}

void PredictivePolicy::Spill(Plan& plan) {
  const TierUsage& host = plan.view.host();
  const TierUsage& disk = plan.view.disk();
  if (disk.budget == 0 || host.budget == 0 || plan.host_used <= host.high) return;
  uint64_t want = plan.host_used - host.low;
  want = std::min(want, disk.budget > disk.used ? disk.budget - disk.used : 0);
  uint64_t covered = 0;
  while (covered < want) {
    if (spilling_ == kNoGroup || !groups_.Alive(spilling_)) {
      spilling_ = PickVictim(away_trusted_, away_lru_, plan.now, false, 0, true, false);
      if (spilling_ == kNoGroup) break;
      place_[spilling_].cursor.Reset();
    }
    bool budget = true;
    const bool done = Walk(spilling_, Order::kSlotMajor, [&](const Region& r, uint32_t page, bool) {
      if (covered >= want) return false;
      if (!SpillableNow(r, page)) return true;
      if (plan.spill_left < r.page_size) {
        budget = false;
        return false;
      }
      plan.out->moves.push_back({r.id, page, Tier::kDisk, MoveClass::kSpill});
      plan.spill_left -= r.page_size;
      covered += r.page_size;
      return true;
    });
    if (!budget) return;
    if (!done) return;  // wanted enough; the cursor resumes here
    place_[spilling_].spilled = true;
    spilling_ = kNoGroup;
  }
  // Then what the device evicted itself, oldest first.
  while (covered < want && !evicted_pages_.empty()) {
    const uint64_t key = evicted_pages_.front();
    Region* r = index_.Find(KeyRegion(key));
    const uint32_t page = KeyPage(key);
    if (r && page < r->pages.size() && SpillableNow(*r, page)) {
      if (plan.spill_left < r->page_size) return;
      plan.out->moves.push_back({r->id, page, Tier::kDisk, MoveClass::kSpill});
      plan.spill_left -= r->page_size;
      covered += r->page_size;
    }
    evicted_pages_.pop_front();
  }
  if (covered >= want || !spill_scan_.Due(plan.now)) return;
  // Host pages neither path holds (demoted from a group still on the device,
  // as a swap's room): oldest first. A scan, but only while the host is over
  // its high watermark with nothing else to spill, so that a full host tier
  // always drains; paced when it finds less than it wants (a closed spill
  // gate), so that it is not every tick.
  const uint64_t need = std::min(want - covered, plan.spill_left);
  if (need == 0) return;
  uint64_t found = 0;
  const auto any = [](const Region&, uint32_t) { return true; };
  for (const PageRef& p : OldestSpillable(plan.view, need, any)) {
    if (found >= need || plan.spill_left < p.region->page_size) break;
    plan.out->moves.push_back({p.region->id, p.page, Tier::kDisk, MoveClass::kSpill});
    plan.spill_left -= p.region->page_size;
    found += p.region->page_size;
  }
  // Enough for this tick (its budget may have been the limit): there may
  // be more to spill at the next.
  spill_scan_.Scanned(plan.now, found >= need);
}

}  // namespace kvtier
