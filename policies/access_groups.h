// AccessGroups: which slots are used together, and when each group returns.
//
// A slot is one page offset across a region's siblings (regions of one size:
// an engine's per-layer KV tensors, so a slot is one KV block in every
// layer; a region without siblings has slots of one page). Slots are keyed
// by PageKey(first sibling's id, offset). The evidence is what the runtime
// sees on a GPU: faults on slots that were off the device, first touches of
// never-touched slots (the engine writing new KV) and hints; accesses to
// resident pages are invisible.
//  - An episode is a burst of that evidence: ticks with some at most
//    episode_gap_ticks apart, for at most episode_max_ticks. A session's
//    return faults its slots within one (a step touches every layer within
//    milliseconds). It is weighed when it closes.
//  - A group with a quarter of its slots faulting in an episode, or its
//    marker slot (see SetMarker), is present in it; present groups that
//    faulted a quarter of their slots become one, the largest, which owns
//    the episode (a visit, if it was idle); one present by its marker alone
//    visits on its own. Faulting slots of groups that do not visit (a block
//    another session took over, a block written while another session ran)
//    move to the owner, else to a new group, which visits; a slot that moves
//    twice beside another session's return is shared, like a system prompt
//    every session reads, and goes to the shared group, which visits
//    whenever its slots fault but owns no episode. Slots that are most of
//    the episode leaving one group (a session leaving a pool written at
//    once, or sessions prefilled together) do not count as a move.
//  - First touches join the owner, else the group being written (the one
//    that owned an episode or took first touches last, within writer_ticks,
//    each first touch of it keeping it so) if they are a trickle (a decode's
//    new blocks) or it is still being prefilled (no trickle since its last
//    burst), else a new group: a
//    session's KV written in pieces (its prompt in chunks, then each turn's
//    blocks) is so one group, and the next session's prompt starts its own.
//    Pieces written apart become one when they next come back in one
//    episode; sessions written together are one group until their returns
//    tell them apart (see Split).
//  - A group whose slots were all off the device (the caller says so, see
//    Split) and only part of which faulted in its visit was two sessions
//    written together: the caller splits off the rest.
// Return prediction: an EWMA of each group's interval between visits and of
// its error. A gap of about k steady intervals counts as k returns, k-1 of
// them not seen (a resident group's use is invisible). A prediction is
// trusted when the group's own error is small after two intervals, or when
// it returned at about the population's interval while the population is
// regular: a fixed think time is learned from the first groups that return
// and then predicts every group from its first visit. The population's
// interval is a median over recent groups, one vote each.
// Memory: 4 bytes per tracked slot plus 8 per slot in its group's list.
// Thread-safety: none (the policy thread).
#pragma once

#include <cstdint>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "policies/page_state_map.h"
#include "runtime/page_table.h"

namespace kvtier {

using GroupId = uint32_t;
inline constexpr GroupId kNoGroup = 0;

struct AccessGroupOptions {
  uint32_t episode_gap_ticks = 3;  // 30 ms
  uint32_t episode_max_ticks = 5;
  uint32_t writer_ticks = 200;      // a session's new blocks come at most this far apart (2 s)
  uint32_t visit_gap_ticks = 1000;  // a visit starts after this long without evidence (10 s)
  double trust_spread = 0.15;  // trusted when the error EWMA is below this share of the interval
  double alpha = 0.5;          // weight of the newest interval in the EWMAs
};

struct AccessGroup {
  std::vector<uint64_t> slots;  // slot keys; entries whose slot moved on are stale
  uint32_t live = 0;            // slots whose group this is
  bool sorted = true;           // slots in key (region, then offset) order
  uint64_t marker = 0;          // a slot whose fault is a visit (0: none)
  uint64_t latest = 0;          // its slot with the latest evidence (one the engine reads)
  uint32_t visit = 0;           // tick the latest visit started (0: none yet)
  uint32_t last_active = 0;     // tick of its latest evidence
  uint32_t idle_since = 0;      // its last_active when its latest visit began
  uint32_t prev_visit = 0;      // the visit before the latest one
  uint32_t visits = 0;
  double interval = 0;  // EWMA of ticks between visits (0: fewer than two visits)
  double spread = 0;    // EWMA of |interval error|
  uint32_t intervals = 0;
};

// What a closed episode showed.
struct EpisodeVisit {
  GroupId group;
  uint32_t faulted;  // its slots that faulted in the episode
};

class AccessGroups {
 public:
  explicit AccessGroups(const AccessGroupOptions& options = {}) : options_(options) {}

  // Evidence on slot `offset` of the siblings whose first is `first`:
  // a fault of an off-device slot, or a first touch. Weighed at EndTick.
  void OnEvidence(const Region& first, uint32_t offset, bool first_touch);
  // Ends the tick: marks the groups with evidence in use, and when the open
  // episode is over, weighs it (see top) and returns its visits, largest
  // first. Groups emptied by moves are freed (TakeFreed).
  void EndTick(uint32_t now, std::vector<EpisodeVisit>* visits);
  // True while an episode is open (its visits are still to come).
  bool episode_open() const { return episode_.open; }
  // Groups with evidence in the last EndTick's tick.
  const std::vector<GroupId>& touched() const { return touched_; }
  // The group that took the first touches of the episode the last EndTick
  // closed (kNoGroup if none): its last use moved to the episode's end,
  // though it may not be among touched() (a decode's new blocks).
  GroupId written() const { return written_; }

  GroupId GroupOf(uint64_t slot) const;
  AccessGroup& group(GroupId id) { return groups_[id]; }
  const AccessGroup& group(GroupId id) const { return groups_[id]; }
  bool Alive(GroupId id) const {
    return id != kNoGroup && id < groups_.size() && groups_[id].live > 0;
  }
  GroupId shared() const { return shared_; }
  // The slot whose fault counts as a visit of `g` (a prefetch left it out).
  void SetMarker(GroupId g, uint64_t slot) { groups_[g].marker = slot; }
  // Moves the slots of `g` for which `keep` is false to a new group that
  // inherits g's history; returns it (kNoGroup if nothing moved).
  template <typename Keep>
  GroupId Split(GroupId g, Keep&& keep);
  // After a visit of `g` that showed only part of it in use (two sessions
  // written together): the slots for which `keep` is false leave for a new
  // group, idle since before the visit; both forget their intervals (they
  // were the other's too). Returns the new group (kNoGroup if none left).
  template <typename Keep>
  GroupId SplitOffAfterVisit(GroupId g, Keep&& keep);
  // Drops the group's intervals, keeping its latest visit: after a split
  // they were another session's too.
  void ForgetIntervals(GroupId id);
  // Sorts the group's list and drops its stale entries.
  void Compact(GroupId id);
  // Groups freed since the last call. Their ids are handed out again only
  // after this call, so a caller's state for an old group is dropped before
  // a new group can have its id.
  std::vector<GroupId> TakeFreed();

  // The group's next use by its own or the population's interval, on or
  // after now - Slack; false when there is no interval to go by.
  bool PredictNext(const AccessGroup& g, uint32_t now, uint32_t* next) const;
  bool Trusted(const AccessGroup& g) const;
  // Ticks a predicted use may be late before it counts as missed.
  uint32_t Slack(const AccessGroup& g) const;
  double population_interval() const { return population_interval_; }
  // Changes whenever the population's interval moves by more than 5%.
  uint64_t population_version() const { return population_version_; }
  size_t group_count() const { return groups_.size() - 1 - free_.size() - freed_.size(); }
  // One more than the largest GroupId in use.
  size_t capacity() const { return groups_.size(); }

 private:
  struct Slot {
    uint32_t group : 30 = kNoGroup;
    uint32_t moves : 2 = 0;  // moves to another group's episode (2: shared)
  };
  struct Evidence {
    const Region* first;  // valid until the tick ends
    uint32_t offset;
    bool first_touch;
  };
  struct Episode {
    bool open = false;
    uint32_t start = 0, last = 0;
    std::unordered_map<GroupId, uint32_t> faults;  // per group, slots faulted
    std::vector<uint64_t> faulted;                 // slot keys, as they came
    std::unordered_set<uint64_t> seen;             // the same, for counting each once
    std::vector<uint64_t> first_touches;
    std::vector<GroupId> marked;  // groups whose marker slot faulted
    std::vector<GroupId> idle;    // groups idle before their evidence in it
  };
  GroupId NewGroup();
  void Assign(uint64_t slot, GroupId to);
  void Close(uint32_t now, std::vector<EpisodeVisit>* visits);
  void RecordVisit(GroupId id, uint32_t start);
  bool Regular() const;

  const AccessGroupOptions options_;
  std::unordered_map<uint64_t, Slot> group_of_;
  std::vector<AccessGroup> groups_{1};  // [0] is kNoGroup
  std::vector<GroupId> free_, freed_;
  std::vector<Evidence> pending_;
  Episode episode_;
  GroupId shared_ = kNoGroup;
  std::vector<GroupId> touched_;    // groups with evidence this tick
  GroupId written_ = kNoGroup;      // took the closed episode's first touches
  GroupId writer_ = kNoGroup;       // the session being written
  uint32_t writer_last_ = 0;        // its last first touch
  bool writer_prefilling_ = false;  // its last episode wrote a burst (a prefill)
  // More new slots than this in one episode are a prefill, not a decode's
  // trickle (a decode step writes one block per running request).
  static constexpr size_t kTrickleSlots = 64;
  static constexpr size_t kSamples = 31;
  struct Sample {
    GroupId group;
    double interval;
  };
  std::vector<Sample> samples_;
  size_t next_sample_ = 0;
  double population_interval_ = 0;
  double population_spread_ = 0;
  uint64_t population_version_ = 0;
};

// ---- template definitions ----

template <typename Keep>
GroupId AccessGroups::Split(GroupId g, Keep&& keep) {
  GroupId fresh = kNoGroup;
  const std::vector<uint64_t> slots = groups_[g].slots;
  for (uint64_t key : slots) {
    auto it = group_of_.find(key);
    if (it == group_of_.end() || it->second.group != g || keep(key)) continue;
    if (fresh == kNoGroup) {
      fresh = NewGroup();
      AccessGroup& f = groups_[fresh];
      const AccessGroup& from = groups_[g];
      f.visit = from.visit;
      f.last_active = from.last_active;
      f.visits = from.visits;
      f.interval = from.interval;
      f.spread = from.spread;
      f.intervals = from.intervals;
    }
    Assign(key, fresh);
  }
  return fresh;
}

template <typename Keep>
GroupId AccessGroups::SplitOffAfterVisit(GroupId g, Keep&& keep) {
  const GroupId rest = Split(g, std::forward<Keep>(keep));
  if (rest == kNoGroup) return kNoGroup;
  AccessGroup& r = groups_[rest];
  const AccessGroup& from = groups_[g];
  r.last_active = from.idle_since;
  r.visit = from.prev_visit;
  r.visits = from.visits > 1 ? from.visits - 1 : 1;
  r.marker = 0;
  r.latest = r.slots.empty() ? 0 : r.slots.front();
  ForgetIntervals(g);
  ForgetIntervals(rest);
  return rest;
}

}  // namespace kvtier
