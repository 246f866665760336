// ProbeBook: predictive's queues of probe candidates and of the probes out
// (predictive.h, step 3: in use or idle?).
//
// Accesses to resident pages are invisible, so predictive asks: a group
// whose evidence has aged gets a probe (its marker page demoted; an engine
// still reading the group faults it back within a step). The book holds
//  - the evidence of each group, as (tick, group) in the order it came:
//    the candidates, visited once their evidence is `age` ticks old
//    (active_ticks; 1 once a returning session made every recently used
//    group a suspect, SuspectAll);
//  - the probes out, as (end of window, group): a probe whose window ends
//    without a fault says its group is idle.
// The book decides nothing about a group: its caller says, per candidate,
// whether it is done with it or must stop (Visit), and what an expired
// probe means (Expire).
// Thread-safety: none; the policy's tick serialises it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <utility>

#include "policies/access_groups.h"

namespace kvtier {

class ProbeBook {
 public:
  static constexpr size_t kDefaultMaxCandidates = size_t{1} << 16;

  // What a visit's caller did with a candidate.
  enum class Visited {
    kDone,     // probed, ranked idle, or stale: it leaves the book
    kLater,    // not now (no pressure): it stays, and so do the ones after
    kBlocked,  // no room to move a marker: it stays; the visit ends at once
  };

  explicit ProbeBook(size_t max_candidates = kDefaultMaxCandidates)
      : max_candidates_(max_candidates) {}

  // Evidence of `g` at `tick` (its last use then).
  void Note(uint32_t tick, GroupId g) { candidates_.emplace_back(tick, g); }
  // A session came back: the next visit takes every candidate whose
  // evidence is a tick old, not active_ticks.
  void SuspectAll() { suspect_all_ = true; }
  bool suspect_all() const { return suspect_all_; }

  // Calls visit(tick, group) for the candidates, oldest first, whose
  // evidence is at least `active_ticks` old (1 after SuspectAll, which it
  // clears), until one is not kDone. Then, unless one was kBlocked, drops the
  // oldest candidate when more than the book's maximum are kept.
  template <typename Visit>
  void VisitAged(uint32_t now, uint32_t active_ticks, Visit visit) {
    const uint32_t age = suspect_all_ ? 1 : active_ticks;
    suspect_all_ = false;
    while (!candidates_.empty() && candidates_.front().first + age <= now) {
      const auto [tick, g] = candidates_.front();
      const Visited v = visit(tick, g);
      if (v == Visited::kBlocked) return;
      if (v == Visited::kLater) break;
      candidates_.pop_front();
    }
    if (candidates_.size() > max_candidates_) candidates_.pop_front();
  }
  size_t candidates() const { return candidates_.size(); }

  // A probe of `g` whose window ends at `window_end`.
  void Start(uint32_t window_end, GroupId g) { probes_.emplace_back(window_end, g); }
  // Calls expired(group) for each probe whose window ended by `now`, in the
  // order they started, and forgets them.
  template <typename Expired>
  void Expire(uint32_t now, Expired expired) {
    while (!probes_.empty() && probes_.front().first <= now) {
      const GroupId g = probes_.front().second;
      probes_.pop_front();
      expired(g);
    }
  }
  size_t probes_out() const { return probes_.size(); }

 private:
  const size_t max_candidates_;
  std::deque<std::pair<uint32_t, GroupId>> candidates_;  // (tick, group), oldest first
  std::deque<std::pair<uint32_t, GroupId>> probes_;      // (window end, group)
  bool suspect_all_ = false;
};

}  // namespace kvtier
