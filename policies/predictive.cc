// PredictivePolicy (see predictive.h).
#include "policies/predictive.h"

#include <algorithm>
#include <limits>

namespace kvtier {

namespace {

constexpr uint32_t kWakeTicks = 50;     // re-check predictions this often when idle
constexpr uint32_t kRerankTicks = 100;  // re-rank untrusted groups this often
// A first touch under pressure populates at most 1/kAheadShare of the
// device budget ahead (in all layers).
constexpr uint64_t kAheadShare = 64;
// A group larger than 1/kWholeGroupShare of the device budget is neither
// brought back whole nor prefetched: it would push out the groups in use.
constexpr uint64_t kWholeGroupShare = 2;

}  // namespace

PredictivePolicy::Place& PredictivePolicy::PlaceOf(GroupId g) {
  if (g >= place_.size()) place_.resize(g + 1);
  return place_[g];
}

PredictivePolicy::Set* PredictivePolicy::SetOf(const Place& p) {
  switch (p.where) {
    case Where::kDevice:
      if (!p.idle) return &dev_active_;
      return p.trusted ? &dev_trusted_ : &dev_lru_;
    case Where::kAway:
      return p.trusted ? &away_trusted_ : &away_lru_;
    case Where::kNone:
      break;
  }
  return nullptr;
}

void PredictivePolicy::Drop(GroupId g) {
  Place& p = PlaceOf(g);
  if (Set* s = SetOf(p)) s->erase({p.key, g});
  p.where = Where::kNone;
}

void PredictivePolicy::Rank(GroupId g, Where where, uint32_t now) {
  Drop(g);
  Place& p = PlaceOf(g);
  const AccessGroup& group = groups_.group(g);
  uint32_t next = 0;
  p.trusted = options_.predict && p.misses < 2 && groups_.Trusted(group) &&
              groups_.PredictNext(group, now, &next);
  p.where = where;
  p.idle = where == Where::kDevice && Idle(g, now);
  p.key = p.trusted && (p.idle || where == Where::kAway) ? next : group.last_active;
  SetOf(p)->insert({p.key, g});
}

bool PredictivePolicy::InUse(GroupId g, uint32_t now) const {
  return !Idle(g, now) && now - groups_.group(g).last_active <= options_.active_ticks;
}

bool PredictivePolicy::Idle(GroupId g, uint32_t now) const {
  const uint32_t last = groups_.group(g).last_active;
  const Place& p = place_[g];
  const bool probed = p.probed > last && now - p.probed >= options_.probe_ticks;
  return probed || now - last >= options_.idle_ticks;
}

bool PredictivePolicy::MarkerPage(GroupId g, Region** region, uint32_t* page) {
  // Its latest slot: the engine reads it whenever it reads the group.
  const uint64_t slot = groups_.group(g).latest;
  if (groups_.GroupOf(slot) != g) return false;
  Region* r = index_.Find(KeyRegion(slot));
  if (!r || KeyPage(slot) >= r->pages.size()) return false;
  *region = r;
  *page = KeyPage(slot);
  return true;
}

bool PredictivePolicy::ArmMarker(Plan& plan, GroupId g) {
  Region* r;
  uint32_t page;
  if (!MarkerPage(g, &r, &page) || TierOf(*r, page) != Tier::kDevice || !Movable(r->pages[page])) {
    return true;
  }
  // One page: it goes even past the host budget (a full host must not keep
  // the policy from learning what is idle).
  if (plan.demand_down_left < r->page_size) return false;
  // First in the mover's order: a probe's window starts now.
  PlanDemotion(plan, *r, page, MoveClass::kDemand);
  groups_.SetMarker(g, PageKey(r->id, page));
  return true;
}

void PredictivePolicy::Probe(Plan& plan) {
  const uint32_t now = plan.now;
  const TierUsage& dev = plan.view.device();
  const bool pressure = dev.budget && plan.dev_used > dev.low;
  // A session that came back under pressure made the others recently used
  // suspects at once (SuspectAll): a probe tells within a step whether they
  // still are.
  using Visited = ProbeBook::Visited;
  probes_.VisitAged(now, options_.active_ticks, [&](uint32_t tick, GroupId g) {
    if (!groups_.Alive(g) || groups_.group(g).last_active != tick || g == groups_.shared() ||
        PlaceOf(g).where != Where::kDevice || place_[g].probed > tick) {
      return Visited::kDone;  // used again since, gone, or probed already
    }
    if (!pressure) return Visited::kLater;  // probe later, if memory gets tight
    if (!ArmMarker(plan, g)) return Visited::kBlocked;
    if (now - tick >= options_.idle_ticks) {  // idle long enough: no probe needed
      Rank(g, Where::kDevice, now);
    } else {
      place_[g].probed = now;
      probes_.Start(now + options_.probe_ticks, g);
    }
    return Visited::kDone;
  });
}

GroupId PredictivePolicy::PickVictim(const Set& trusted, const Set& lru, uint32_t now,
                                     bool for_prefetch, uint32_t due, bool skip_spilled,
                                     bool desperate) const {
  // The sets hold device groups known idle only (and off-device ones).
  auto eligible = [&](GroupId g) {
    const Place& p = place_[g];
    return p.queued == 0 && !(skip_spilled && p.spilled) && g != groups_.shared();
  };
  GroupId t = kNoGroup, l = kNoGroup;
  uint64_t t_next = 0;
  for (auto it = trusted.rbegin(); it != trusted.rend(); ++it) {
    if (eligible(it->second)) {
      t = it->second;
      t_next = it->first;
      break;
    }
  }
  for (auto it = lru.begin(); it != lru.end(); ++it) {
    if (eligible(it->second)) {
      l = it->second;
      break;
    }
  }
  const double population = groups_.population_interval();
  if (for_prefetch) {
    if (t != kNoGroup && t_next > due) return t;
    if (l != kNoGroup && population > 0 && due <= now + population / 2) return l;
    return kNoGroup;
  }
  if (t != kNoGroup && (l == kNoGroup || t_next > now + population / 2)) return t;
  if (l != kNoGroup || t != kNoGroup || !desperate) return l != kNoGroup ? l : t;
  // No group is known idle, and the engine waits on a fault: the group with
  // the oldest evidence goes, unless it has some within desperate_ticks
  // (the driver would evict blindly otherwise, while the kernel waits).
  for (const auto& [last, g] : dev_active_) {
    if (now - last <= options_.desperate_ticks) break;  // oldest first: the rest are newer
    const Place& p = place_[g];
    if (p.queued == 0 && g != groups_.shared()) return g;
  }
  return kNoGroup;
}

void PredictivePolicy::CheckMisses(uint32_t now) {
  for (Set* set : {&dev_trusted_, &away_trusted_}) {
    while (!set->empty()) {
      const auto [key, g] = *set->begin();
      if (key + groups_.Slack(groups_.group(g)) >= now) break;
      Place& p = place_[g];
      // An off-device group that did not fault, or a prefetched one whose
      // marker did not, was not used; a resident one may have been.
      if (p.where == Where::kAway || p.armed) ++p.misses;
      Rank(g, p.where, now);
    }
  }
}

void PredictivePolicy::OnSignal(const Signal& s, const Region& region) {
  const uint64_t size = region.pages.size();
  if (s.page >= size) return;
  const uint32_t end = static_cast<uint32_t>(std::min<uint64_t>(uint64_t{s.page} + s.pages, size));
  for (uint32_t p = s.page; p < end; ++p) signals_.push_back({region.id, p, s.kind, s.from});
}

void PredictivePolicy::OnVisit(const EpisodeVisit& v, uint32_t now) {
  const GroupId g = v.group;
  // Its faults ranked it on the device already (see Decide); returned_at
  // says it was off it, not prefetched, when this visit's faults began.
  const Place& before = PlaceOf(g);
  const bool fresh = before.returned_at != 0 && before.returned_at >= groups_.group(g).visit;
  const bool returning = (fresh || before.where == Where::kAway) && !before.armed;
  // Two sessions written together: only part of an off-device group came
  // back, so the rest is another session's. Its slots whose first-layer page
  // is still off the device did not fault (a group's demotion takes the
  // first layer first); those on the device faulted, or are resident and
  // may be in use: they stay (so a group caught in its demotion keeps what
  // is still on the device).
  if (returning && v.faulted > 0 && uint64_t{v.faulted} * 4 < uint64_t{groups_.group(g).live} * 3) {
    const GroupId rest = groups_.SplitOffAfterVisit(g, [&](uint64_t slot) {
      Region* r = index_.Find(KeyRegion(slot));
      return r && KeyPage(slot) < r->pages.size() && TierOf(*r, KeyPage(slot)) == Tier::kDevice;
    });
    // Ranked on the device: pages of its later layers may still be there,
    // and a victim's walk skips what is not (may grow place_: p is fetched
    // below).
    if (rest != kNoGroup) Rank(rest, Where::kDevice, now);
  }
  Place& p = PlaceOf(g);
  p.misses = 0;
  p.armed = false;
  if (evicting_ == g) evicting_ = kNoGroup;
  if (spilling_ == g) spilling_ = kNoGroup;
  const bool away = returning;
  if (away) probes_.SuspectAll();  // a return: who else is still in use?
  Rank(g, Where::kDevice, now);
  if (away && p.queued == 0 && !TooLargeToMoveWhole(g)) {
    ++p.queued;
    p.cursor.Reset();
    demand_.push_back(g);
  }
}

bool PredictivePolicy::TooLargeToMoveWhole(GroupId g) const {
  return GroupBytes(g) * kWholeGroupShare > device_budget_;
}

uint64_t PredictivePolicy::GroupBytes(GroupId g) const {
  const AccessGroup& group = groups_.group(g);
  const Region* first = group.slots.empty() ? nullptr : index_.Find(KeyRegion(group.slots[0]));
  return first ? uint64_t{group.live} * first->page_size * index_.Siblings(first->size).size() : 0;
}

void PredictivePolicy::Decide(const PolicyView& view, Decisions* out) {
  index_.Build(*view.regions);
  Plan plan{view, out, view.now};
  plan.up_left = view.budget.up;
  plan.down_left = view.budget.down;
  plan.spill_left = view.budget.spill;
  plan.demand_up_left = view.budget.demand_up;
  plan.demand_down_left = view.budget.demand_down;
  plan.dev_used = view.device().used;
  device_budget_ = view.device().budget ? view.device().budget : UINT64_MAX / 4;
  plan.host_used = view.host().used;

  std::vector<uint64_t> evicted;  // slots of pages the device evicted itself
  ReadSignals(view, &evicted);
  PlaceGroups(view.now, evicted);
  ExpireIdle(view.now);

  Demand(plan);  // step 1
  Probe(plan);   // step 3
  if (options_.predict && hinted_.empty() && demand_slots_.empty() && demand_.empty()) {
    Prefetch(plan);  // step 2
  }
  KeepWatermarks(plan);  // step 4
  Spill(plan);           // step 5

  if (groups_.episode_open()) {
    out->wake_tick = view.now + options_.groups.episode_gap_ticks + 1;
  } else if (options_.predict && !(away_trusted_.empty() && dev_trusted_.empty())) {
    out->wake_tick = view.now + kWakeTicks;
  }
}

void PredictivePolicy::ReadSignals(const PolicyView& view, std::vector<uint64_t>* evicted) {
  // The tick's evidence, as slots (one block in every layer). A first touch
  // in one layer means the others' pages of the block come next: populating
  // them on the device ahead saves their population faults.
  SlotBatch faulted, written, ahead;
  written.populate = ahead.populate = true;
  const bool below_low = view.device().budget == 0 || view.device().used < view.device().low;
  for (const Signal1& s : signals_) {
    Region* r = index_.Find(s.region);
    if (!r) continue;
    const std::vector<Region*>& layers = index_.Siblings(r->size);
    const Region& first = layers.empty() ? *r : *layers.front();
    const uint64_t slot = PageKey(first.id, s.page);
    switch (s.kind) {
      case SignalKind::kFault:
        groups_.OnEvidence(first, s.page, s.from == Tier::kUntouched);
        if (s.from == Tier::kHost || s.from == Tier::kDisk) faulted.slots.push_back(slot);
        if (s.from == Tier::kUntouched) {
          written.slots.push_back(slot);
          FillAhead(first, *r, layers.size(), s.page, below_low, &ahead);
        }
        break;
      case SignalKind::kWillNeed:
        hinted_.push_back(PageKey(s.region, s.page));
        groups_.OnEvidence(first, s.page, TierOf(*r, s.page) == Tier::kUntouched);
        break;
      case SignalKind::kAccess:
        groups_.OnEvidence(first, s.page, false);
        break;
      case SignalKind::kCold:
        cold_.push_back(PageKey(s.region, s.page));
        break;
      case SignalKind::kEvicted:
        evicted->push_back(slot);
        evicted_pages_.push_back(PageKey(s.region, s.page));
        if (evicted_pages_.size() > (1u << 16)) evicted_pages_.pop_front();
        break;
      default:
        break;
    }
  }
  signals_.clear();
  // The blocks written come in every layer before the blocks ahead.
  for (SlotBatch* b : {&faulted, &written, &ahead}) {
    if (b->slots.empty()) continue;
    std::sort(b->slots.begin(), b->slots.end());
    b->slots.erase(std::unique(b->slots.begin(), b->slots.end()), b->slots.end());
    demand_slots_.push_back(std::move(*b));
  }
}

void PredictivePolicy::FillAhead(const Region& first, const Region& r, size_t layer_count,
                                 uint32_t page, bool below_low, SlotBatch* ahead) {
  // The blocks of the next populate_ahead_bytes (populate_ahead.h says why);
  // under pressure, at most 1/kAheadShare of the device each time.
  uint64_t ahead_bytes = options_.populate_ahead_bytes;
  if (!below_low) {
    ahead_bytes = std::min<uint64_t>(
        ahead_bytes, device_budget_ / kAheadShare / std::max<size_t>(1, layer_count));
  }
  const uint32_t blocks = static_cast<uint32_t>(ahead_bytes / first.page_size);
  ahead_.OnFirstTouch(
      first.id, page, static_cast<uint32_t>(r.pages.size()), blocks,
      [&](uint32_t next) {
        return groups_.GroupOf(PageKey(first.id, next)) == kNoGroup &&
               TierOf(first, next) == Tier::kUntouched;
      },
      &ahead->slots);
}

void PredictivePolicy::PlaceGroups(uint32_t now, const std::vector<uint64_t>& evicted) {
  groups_.EndTick(now, &visits_);
  if (place_.size() < groups_.capacity()) place_.resize(groups_.capacity());
  for (GroupId g : groups_.touched()) {
    probes_.Note(now, g);
    // Faulting back: its pages return (the faulted slots now, the rest of
    // the group when its visit is weighed, at the episode's close; returned_at
    // keeps for that visit that it was off the device). A group ranked idle
    // is in use again.
    Place& p = PlaceOf(g);
    if (p.where == Where::kAway && g != evicting_) {
      if (!p.armed) p.returned_at = now;
      Rank(g, Where::kDevice, now);
    } else if (p.where == Where::kDevice && p.idle) {
      Rank(g, Where::kDevice, now);
    }
  }
  // The group that took an episode's new blocks (a decode's, which join the
  // session being written) was used at the episode's end, with no evidence
  // of its own: it is probed from then on too, or its next use, served from
  // the device, would go unseen.
  if (const GroupId w = groups_.written(); groups_.Alive(w)) {
    probes_.Note(groups_.group(w).last_active, w);
    if (place_[w].where == Where::kDevice && place_[w].idle) Rank(w, Where::kDevice, now);
  }
  for (GroupId g : groups_.TakeFreed()) {
    Drop(g);
    place_[g] = Place{};
    if (evicting_ == g) evicting_ = kNoGroup;
    if (spilling_ == g) spilling_ = kNoGroup;
  }
  // Pages the device evicted itself (it was full at a fault): a group not in
  // use that lost one is the victim the policy was too slow to pick. It
  // goes off the device whole (the next demotions walk it first), and so
  // becomes a prefetch and spill candidate. Ranking it away with its other
  // pages left on the device would hide them from every victim pick. A
  // group in use faults its page back; so does any group while another
  // victim is being walked.
  if (!evicted.empty()) last_driver_eviction_ = now;
  for (uint64_t slot : evicted) {
    const GroupId g = groups_.GroupOf(slot);
    if (evicting_ != kNoGroup && groups_.Alive(evicting_)) break;
    if (groups_.Alive(g) && g != groups_.shared() && PlaceOf(g).where == Where::kDevice &&
        !InUse(g, now) && place_[g].queued == 0) {
      evicting_ = g;
      Rank(g, Where::kAway, now);
      place_[g].cursor.Reset();
      place_[g].armed = false;
      place_[g].left_behind = false;
    }
  }
  for (const EpisodeVisit& v : visits_) {
    OnVisit(v, now);
    if (groups_.Alive(v.group)) probes_.Note(groups_.group(v.group).last_active, v.group);
  }
}

void PredictivePolicy::ExpireIdle(uint32_t now) {
  // Probes whose window passed without a fault: those groups are idle.
  probes_.Expire(now, [&](GroupId g) {
    if (groups_.Alive(g) && place_[g].where == Where::kDevice && !place_[g].idle && Idle(g, now)) {
      Rank(g, Where::kDevice, now);
    }
  });
  // Groups without evidence for idle_ticks are idle whether or not a probe
  // asked (the oldest evidence is at the front): a victim pick must see them,
  // or a group of long ago outstays every recently used one.
  // (A group whose key is older than its evidence is ranked again by that
  // evidence: it leaves the front either way, so the loop ends.)
  while (!dev_active_.empty() && now - dev_active_.begin()->first >= options_.idle_ticks) {
    Rank(dev_active_.begin()->second, Where::kDevice, now);
  }
  if (options_.predict) {
    CheckMisses(now);
    // What the population teaches (a regular interval, or a new one) can
    // change every group's prediction: rank them again now and then.
    if (now - last_rerank_ >= kRerankTicks) {
      last_rerank_ = now;
      const bool moved = groups_.population_version() != ranked_version_;
      ranked_version_ = groups_.population_version();
      for (Set* set : {&dev_lru_, &dev_active_, &away_lru_, &dev_trusted_, &away_trusted_}) {
        if (!moved && (set == &dev_trusted_ || set == &away_trusted_)) continue;
        std::vector<GroupId> ids;
        for (const auto& [key, g] : *set) ids.push_back(g);
        for (GroupId g : ids) Rank(g, place_[g].where, now);
      }
    }
  }
}

void PredictivePolicy::KeepWatermarks(Plan& plan) {
  const uint32_t now = plan.now;
  // The watermarks, and what the engine said it will not need.
  const TierUsage& dev = plan.view.device();
  // Over the high watermark the device is about to fill and the driver to
  // evict blindly: those demotions are as urgent as demand and may borrow.
  plan.demand = true;
  if (dev.budget && plan.dev_used > dev.high) {
    while (plan.dev_used > dev.high && DemoteOne(plan, MoveClass::kDemand)) {
    }
    // No group is idle, and the device evicted pages itself lately: the
    // groups in use hold more than it, and the driver would go on evicting
    // at the engine's faults while its kernels wait. A group in use larger
    // than the device cannot be read whole between two of its returns:
    // its oldest blocks go now instead, down to the high watermark only,
    // and it keeps its rank (its faults bring them back).
    if (last_driver_eviction_ != 0 && now - last_driver_eviction_ <= options_.active_ticks) {
      while (plan.dev_used > dev.high && DemoteInUse(plan)) {
      }
    }
    plan.demand = false;
    while (plan.dev_used > dev.low && DemoteOne(plan, MoveClass::kDemote)) {
    }
  }
  plan.demand = false;
  while (!cold_.empty()) {
    const uint64_t key = cold_.front();
    Region* r = index_.Find(KeyRegion(key));
    if (r && KeyPage(key) < r->pages.size()) {
      const PageRecord& rec = r->pages[KeyPage(key)];
      if (TierOf(*r, KeyPage(key)) == Tier::kDevice && Movable(rec)) {
        if (!CanDemote(plan, r->page_size)) break;
        PlanDemotion(plan, *r, KeyPage(key), MoveClass::kDemote);
      }
    }
    cold_.pop_front();
  }
}

}  // namespace kvtier
