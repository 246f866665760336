// PredictivePolicy ("predictive"): pages move as access groups, ranked by
// when each group is predicted to return.
//
// Units are slots (a page offset across a region's siblings, i.e. one KV
// block in every layer) and groups of slots from AccessGroups, learned from
// faults, first touches and hints only. Each tick:
//  1. Demand. The slots that faulted come back in every layer, layer-major,
//     at link speed (kDemand): the fault in the first layer brings the
//     block of all the others before their kernels reach it. Hinted pages
//     come first. A group that visits while off the device comes back whole
//     once its visit is weighed (the episode's close), unless it is larger
//     than half the device: moving that whole would push out the groups in
//     use, so its faults bring back what its kernels read. A block first
//     touched in one layer is populated in the others (no copy), and so are
//     the blocks of the next 2 MiB of every layer (a fresh pool is handed
//     out in order; under pressure, at most 1/64 of the device each time),
//     into free room below the high watermark only: that saves the
//     population faults of the request's next blocks and the next
//     request's. The engine writes a block populated ahead without a fault,
//     so no group may ever claim it (populate_ahead.h keeps them). Under
//     pressure the unclaimed blocks behind the latest first touch (handed
//     out) are the first victims, oldest first, but only when a tick starts
//     its demotions with no victim group's walk under way (under steady
//     pressure they can wait long and hold device room); those ahead of it
//     (about to be written) go only when no group is idle. A session that
//     wrote one faults it when it next reads it, and so claims it.
//  2. Prediction (KVTIER_PREDICT). Off-device groups whose return is trusted
//     (and that are no larger than half the device)
//     come back ahead of it (kPrefetch), soonest first: into free room below
//     the low watermark, else in place of a group predicted to return later
//     by more than the candidate's uncertainty (Belady on predictions), or of
//     an untrusted one when the candidate is due within half the population's
//     interval. A prefetched group leaves one page off the device as a
//     marker (its first slot's, in the first layer): the group's use then
//     faults that page (tens of microseconds), so the runtime sees the visit
//     it could not see on resident pages, and the prediction stays fed.
//  3. In use or idle? Accesses to resident pages are invisible, and a
//     session's request goes on for seconds after its last fault. So under
//     pressure (the device above its low watermark), a group whose evidence
//     is active_ticks old gets a probe, and so does every recently used one
//     at once when another group comes back: its marker page is demoted,
//     and an engine still reading the group faults it back within a step
//     (tens of microseconds) and keeps the group in use. A group that took
//     new blocks (a decode's, which fault nothing else) was used then too,
//     and is probed from then on. A probe without a
//     fault for probe_ticks, or idle_ticks without evidence, makes the group
//     idle; until then a group with evidence in active_ticks is in use.
//     (probe_book.h keeps the candidates and the probes out.)
//  4. Victims are whole idle groups, demoted page by page as room is needed,
//     a block in every layer at a time, in the order the blocks were written
//     (a group of sessions prefilled together loses its oldest session first):
//     first a trusted group predicted to return more than half the
//     population's interval from now (furthest first), else the untrusted
//     group used least recently, else the trusted group returning last.
//     Pinned pages stay. When the engine waits on a fault and no group is
//     known idle, the one with the oldest evidence goes unless it has some
//     within desperate_ticks (a scan of the groups, in that case only): the
//     driver would evict blindly otherwise. The device stays under its high
//     watermark, down to the low one once crossed; a promotion beyond the
//     free frames takes its victim along (kRoom). Over the high watermark
//     with no group idle, once the device has evicted pages itself (within
//     active_ticks), a group in use that is larger than the device (sessions
//     written one after another, with prompts too small to tell them
//     apart) gives its oldest blocks, slot-major, down to the high
//     watermark: the pages the driver's own eviction (least recently
//     migrated) would take at the next faults, taken before them. Pages
//     that arrived in the last two ticks stay, the group keeps its rank,
//     and the walk resumes where it stopped (at most kSqueezeScan pages
//     looked at per tick).
//  5. Spills take host pages of off-device groups in the same order when
//     the host tier passes its high watermark, then pages the device
//     evicted itself, oldest first, then (a scan, only while the host is
//     still over its watermark, and after one that found too little, not
//     again for 1, 2, 4, ... up to 1,024 ticks) any host page, least
//     recently used first: swaps' room demotions of groups still on the
//     device, which neither list holds, would otherwise keep the host tier
//     full.
// A group that loses a page to the device's own eviction (it was full at a
// fault) while not in use is the victim the policy was too slow to pick: it
// goes off the device whole. Groups without evidence for idle_ticks become
// victim candidates as they age, probed or not.
// A predicted return that passes without a visit (an off-device group did
// not fault; a prefetched group's marker did not) is a miss; two in a row
// and the group is untrusted until it returns. COLD hints demote pages.
// With prediction off, step 2 and the misses are skipped and every group
// ranks as untrusted (least recently used first).
// A tick costs O(signals + moves + log groups), never a pass over all pages.
// Thread-safety: policy thread only.
#pragma once

#include <cstdint>
#include <deque>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "policies/access_groups.h"
#include "policies/policy_util.h"
#include "policies/populate_ahead.h"
#include "policies/prefetch.h"
#include "policies/probe_book.h"
#include "runtime/policy.h"

namespace kvtier {

struct PredictiveOptions {
  bool predict = true;
  AccessGroupOptions groups;
  uint32_t active_ticks = 20;     // evidence this recent: in use, no probe yet (200 ms)
  uint32_t probe_ticks = 10;      // a probe that does not fault this long: idle (100 ms)
  uint32_t idle_ticks = 3000;     // no evidence this long: idle without a probe (30 s)
  uint32_t desperate_ticks = 50;  // a fault's victim of last resort: no evidence this long (500 ms)
  // Bytes of each layer after a first-touched block populated too: one
  // 2 MiB VA block (32 blocks of 64 KiB, or one page of 2 MiB).
  uint64_t populate_ahead_bytes = uint64_t{2} << 20;
};

class PredictivePolicy : public Policy {
 public:
  explicit PredictivePolicy(const PredictiveOptions& options = {})
      : options_(options), groups_(options.groups) {}
  const char* name() const override { return "predictive"; }
  void OnSignal(const Signal& signal, const Region& region) override;
  void Decide(const PolicyView& view, Decisions* out) override;

  const AccessGroups& groups() const { return groups_; }

 private:
  enum class Where : uint8_t { kNone, kDevice, kAway };
  // A position in a group's slots x sibling regions, per class, in the
  // order of the walk that uses it (see Walk).
  struct Cursor {
    size_t begin = 0;    // first slot of the class being walked
    uint32_t layer = 0;  // sibling index
    size_t i = 0;        // slot index
    size_t end = 0;      // one past the class's last slot, when found
    void Reset() { *this = Cursor{}; }
  };
  struct Place {
    Where where = Where::kNone;
    bool trusted = false;
    uint64_t key = 0;          // its key in the set it is in
    uint8_t queued = 0;        // entries in demand_ and prefetch_
    bool armed = false;        // prefetched with its marker left out
    bool spilled = false;      // its host pages went to disk
    bool left_behind = false;  // its demotion skipped pages it could not move
    uint32_t returned_at = 0;  // tick it faulted while off the device, not prefetched
    bool idle = false;         // ranked as idle (a victim candidate) when last ranked
    uint32_t misses = 0;       // predicted returns that did not come, in a row
    uint32_t due = 0;          // predicted use of the prefetch under way
    uint32_t probed = 0;       // tick its probe page was demoted (0: none)
    Cursor cursor;
    Cursor squeeze;  // DemoteInUse's walk: it keeps its rank, and the other walks their place
  };
  using Set = std::set<std::pair<uint64_t, GroupId>>;
  // The work of one Decide call: what the moves planned so far leave.
  struct Plan {
    const PolicyView& view;
    Decisions* out;
    uint32_t now;
    uint64_t up_left = 0, down_left = 0, spill_left = 0;
    uint64_t demand_up_left = 0, demand_down_left = 0;  // demand may borrow ahead
    uint64_t dev_used = 0;     // device bytes after the moves planned so far
    uint64_t host_used = 0;    // host bytes after them
    bool demand = false;       // planning a demand promotion now
    bool desperate = false;    // the engine waits on a fault: any group not in this burst may go
    bool prefetching = false;  // victims must return after `due`
    uint32_t due = 0;
    std::vector<GroupId> walked = {};           // victims picked this tick
    std::vector<GroupId> squeezed = {};         // in-use groups DemoteInUse found nothing more in
    uint32_t squeeze_scan_left = kSqueezeScan;  // pages DemoteInUse may still look at
  };
  enum class Step { kDone, kNoBudget, kNoRoom };
  // Pages DemoteInUse looks at in one tick at most: its walks skip what
  // arrived lately, so a tick costs that bound, not the groups' size.
  static constexpr uint32_t kSqueezeScan = 4096;
  // Pages that arrived this recently (this tick or the last: the engine's
  // step brought them) are not DemoteInUse's to take.
  static constexpr uint32_t kSqueezeRecentTicks = 2;

  static bool Movable(const PageRecord& rec) {
    return !(rec.flags.load(std::memory_order_relaxed) & (kPagePinned | kPageInFlight));
  }
  static Tier TierOf(const Region& r, uint32_t page) {
    return r.pages[page].tier.load(std::memory_order_relaxed);
  }
  Place& PlaceOf(GroupId g);
  Set* SetOf(const Place& p);
  void Rank(GroupId g, Where where, uint32_t now);
  void Drop(GroupId g);
  bool InUse(GroupId g, uint32_t now) const;
  // Not in use, and known idle: its probe did not fault for probe_ticks, or
  // it had no evidence for idle_ticks.
  bool Idle(GroupId g, uint32_t now) const;
  // The page a probe demotes: the group's latest slot's in its first
  // region, a block the engine reads whenever it reads the group.
  bool MarkerPage(GroupId g, Region** region, uint32_t* page);
  // Demotes g's marker page, if it is on the device, so that the group's
  // next use faults it (tens of microseconds) and is seen: accesses to
  // resident pages are not. False when the tick has no budget left for it.
  bool ArmMarker(Plan& plan, GroupId g);
  void Probe(Plan& plan);
  // The victim among `trusted` and `lru` (see top), or kNoGroup. A prefetch
  // (for_prefetch) takes only a victim returning after `due`, or an
  // untrusted one when `due` is near.
  GroupId PickVictim(const Set& trusted, const Set& lru, uint32_t now, bool for_prefetch,
                     uint32_t due, bool skip_spilled, bool desperate) const;
  void CheckMisses(uint32_t now);
  void OnVisit(const EpisodeVisit& v, uint32_t now);

  // Calls fn(region, page, first) for the pages of group g from its cursor
  // on, advancing the cursor; fn returns false to stop there. Layer-major
  // (every slot in the first layer, then the next layer) brings a group back
  // in the order its kernels read it; slot-major (every layer of a slot,
  // then the next slot, in slot order: the order the engine wrote them)
  // sends one away whole slot by slot, so a group of several sessions
  // written together loses its oldest session first instead of its first
  // layers in every session.
  enum class Order : uint8_t { kLayerMajor, kSlotMajor };
  template <typename Fn>
  bool Walk(GroupId g, Order order, Fn&& fn) {
    return Walk(g, order, PlaceOf(g).cursor, std::forward<Fn>(fn));
  }
  template <typename Fn>
  bool Walk(GroupId g, Order order, Cursor& c, Fn&& fn);
  // `populate`: a never-touched page too (placed on the device, no copy),
  // into free room below the high watermark only.
  Step PromotePage(Plan& plan, const Region& r, uint32_t page, MoveClass why, bool populate);
  bool DemoteOne(Plan& plan, MoveClass why);
  // Demotes the next device page of g, slot-major from cursor `c`; for a
  // group `in_use`, only a page that did not arrive lately, and within the
  // tick's squeeze_scan_left.
  enum class Next { kDemoted, kBlocked, kDone };
  Next DemoteNext(Plan& plan, GroupId g, Cursor& c, MoveClass why, bool in_use);
  // The last resort over the high watermark while the groups in use hold
  // more than the device (see top): one page of the in-use group larger
  // than the device with the oldest evidence, its oldest block first.
  // False when none can go.
  bool DemoteInUse(Plan& plan);
  // Demotes one device page of the oldest block populated ahead that no
  // group claimed; false when there is none (or no budget). Only a block
  // the engine has handed out (one before its latest first touch) unless
  // `unwritten_too`: one ahead of it is room the engine is about to write.
  bool DemoteUnclaimed(Plan& plan, MoveClass why, bool unwritten_too);
  void PlanDemotion(Plan& plan, const Region& r, uint32_t page, MoveClass why);
  Step PromoteGroup(Plan& plan, GroupId g, MoveClass why, bool leave_marker);
  bool CanDemote(const Plan& plan, uint64_t bytes) const;
  // Decide's phases, in its order: the tick's signals become evidence,
  // demand slots and queues (ReadSignals, with FillAhead for a first
  // touch); the groups the evidence touched, freed or evicted are placed
  // again (PlaceGroups); probes and evidence that aged mark groups idle
  // (ExpireIdle); then the numbered steps above: Demand, Probe, Prefetch,
  // KeepWatermarks, Spill.
  struct SlotBatch;
  void ReadSignals(const PolicyView& view, std::vector<uint64_t>* evicted);
  // The blocks a first touch of `page` populates ahead, into `ahead`.
  void FillAhead(const Region& first, const Region& r, size_t layer_count, uint32_t page,
                 bool below_low, SlotBatch* ahead);
  void PlaceGroups(uint32_t now, const std::vector<uint64_t>& evicted);
  void ExpireIdle(uint32_t now);
  void Demand(Plan& plan);
  void Prefetch(Plan& plan);
  // Over the high watermark, down to the low one; then what the engine said
  // it will not need (COLD hints).
  void KeepWatermarks(Plan& plan);
  void Spill(Plan& plan);

  const PredictiveOptions options_;
  AccessGroups groups_;
  RegionIndex index_;
  std::vector<Place> place_;  // by GroupId
  // Device groups known idle (the victim candidates), by prediction or by
  // last use; device groups not known idle, by last evidence; off-device
  // groups, the same two ways. A tick looks at the front of a set only.
  Set dev_trusted_, dev_lru_, dev_active_, away_trusted_, away_lru_;
  struct Signal1 {
    RegionId region;
    uint32_t page;
    SignalKind kind;
    Tier from;
  };
  std::vector<Signal1> signals_;  // this tick's, resolved in Decide
  // Slots that faulted, in batches brought back layer-major.
  struct SlotBatch {
    std::vector<uint64_t> slots;
    uint32_t layer = 0;
    size_t i = 0;
    bool populate = false;  // first touches: never-touched pages go too
  };
  std::deque<SlotBatch> demand_slots_;
  std::deque<GroupId> demand_, prefetch_;
  GroupId evicting_ = kNoGroup;
  GroupId spilling_ = kNoGroup;
  std::deque<uint64_t> hinted_, cold_;  // PageKeys
  // Slots populated ahead with no group then, for reclaim
  // (DemoteUnclaimed), and each region's front of first touches.
  PopulateAhead ahead_;
  // Pages the device evicted itself, oldest first: spill candidates when no
  // off-device group has host pages left (their groups may still be in use).
  std::deque<uint64_t> evicted_pages_;
  ScanBackoff spill_scan_;  // Spill's last resort, a scan of every host page
  std::vector<EpisodeVisit> visits_;
  ProbeBook probes_;  // probe candidates (evidence, oldest first) and probes out
  uint32_t last_rerank_ = 0;
  uint64_t ranked_version_ = 0;
  // The latest tick the device evicted a page itself (0: never).
  uint32_t last_driver_eviction_ = 0;
  uint64_t device_budget_ = 0;  // this tick's
  // The group's bytes in every layer, and whether that is more than a
  // share of the device budget that can move as one (see predictive.cc).
  uint64_t GroupBytes(GroupId g) const;
  bool TooLargeToMoveWhole(GroupId g) const;  // a group came back: probe the recent ones now
};

// ---- template definitions ----

template <typename Fn>
bool PredictivePolicy::Walk(GroupId id, Order order, Cursor& c, Fn&& fn) {
  AccessGroup& g = groups_.group(id);
  while (c.begin < g.slots.size()) {
    const RegionId first = KeyRegion(g.slots[c.begin]);
    // The class's end is found once per class, not once per call: a walk
    // that stops after every page would otherwise cost the class's size
    // each time. It is found again if the slots changed under the cursor.
    const bool end_holds = c.end > c.begin && c.end <= g.slots.size() &&
                           KeyRegion(g.slots[c.end - 1]) == first &&
                           (c.end == g.slots.size() || KeyRegion(g.slots[c.end]) != first);
    if (!end_holds) {
      c.end = c.begin;
      while (c.end < g.slots.size() && KeyRegion(g.slots[c.end]) == first) ++c.end;
    }
    const size_t end = c.end;
    static const std::vector<Region*> kNoRegions;
    Region* head = index_.Find(first);
    const std::vector<Region*>& layers = head ? index_.Siblings(head->size) : kNoRegions;
    if (c.i < c.begin) c.i = c.begin;
    if (order == Order::kLayerMajor) {
      for (; c.layer < layers.size(); ++c.layer, c.i = c.begin) {
        Region* r = layers[c.layer];
        for (; c.i < end; ++c.i) {
          const uint32_t page = KeyPage(g.slots[c.i]);
          if (page >= r->pages.size() || groups_.GroupOf(g.slots[c.i]) != id) continue;
          if (!fn(*r, page, c.layer == 0 && c.i == 0)) return false;
        }
      }
    } else {
      for (; c.i < end; ++c.i, c.layer = 0) {
        if (groups_.GroupOf(g.slots[c.i]) != id) continue;
        const uint32_t page = KeyPage(g.slots[c.i]);
        for (; c.layer < layers.size(); ++c.layer) {
          Region* r = layers[c.layer];
          if (page >= r->pages.size()) continue;
          if (!fn(*r, page, c.layer == 0 && c.i == 0)) return false;
        }
      }
    }
    c.begin = end;
    c.layer = 0;
    c.i = end;
  }
  c.Reset();
  return true;
}

}  // namespace kvtier
