// Prefetchers: which pages to bring to the device before they fault.
//
//  - fault neighbourhood: a fault on page p of a region predicts pages
//    p+1..p+k of the same region (an engine reads a sequence's blocks in
//    order; UVM's own prefetcher stops at the 2 MiB VA block);
//  - cross-layer correlation: an engine with one KV tensor per layer touches
//    the same block offset in every layer's tensor within one step, so a
//    fault on page p of one region predicts page p of every region of the
//    same size (its sibling layers), in allocation order;
//  - hints: pages hinted WILL_NEED go ahead of speculative candidates.
// A first touch (a fault on a never-touched page: the engine writing new KV)
// triggers the same predictions with never-touched targets allowed: promoting
// such a page populates it on the device before the engine writes it there,
// saving the population fault. Other triggers never populate.
// Candidates wait in a PrefetchQueue until the policy has room for them;
// a candidate that is resident, moving, never touched or gone is dropped, and
// a speculative one expires after kSpeculativeTtlTicks.
// Thread-safety: none; policy thread only.
#pragma once

#include <cstdint>
#include <deque>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "policies/lru.h"
#include "policies/page_state_map.h"
#include "runtime/policy.h"

namespace kvtier {

inline constexpr uint32_t kSpeculativeTtlTicks = 50;

// The regions of one Decide call, by id and grouped by size.
class RegionIndex {
 public:
  void Build(const std::vector<RegionPtr>& regions);
  Region* Find(RegionId id) const;
  // Regions whose size is `size`, in id (allocation) order.
  const std::vector<Region*>& Siblings(size_t size) const;

 private:
  std::unordered_map<RegionId, Region*> by_id_;
  std::unordered_map<size_t, std::vector<Region*>> by_size_;
  std::vector<Region*> none_;
};

// True when promoting the page does something: on host or disk (or never
// touched, when `populate`), and not moving.
bool Promotable(const PageRecord& rec, bool populate = false);

class PrefetchQueue {
 public:
  void Add(RegionId region, uint32_t page, uint32_t now, bool hinted, bool populate = false);
  // Offers the candidates, hinted first and then oldest first, to `accept`
  // (bool(const PageRef&)): true takes the candidate out of the queue, false
  // stops and keeps it and everything behind it. Stale candidates are dropped.
  template <typename Accept>
  void Take(const RegionIndex& index, uint32_t now, Accept&& accept);
  size_t size() const { return queued_.size(); }

 private:
  struct Entry {
    uint64_t key;
    uint32_t added;
    bool populate;
  };
  // Returns the candidate's page when it is still worth promoting.
  bool Valid(const RegionIndex& index, const Entry& e, PageRef* ref) const;
  template <typename Accept>
  bool Drain(std::deque<Entry>* q, const RegionIndex& index, uint32_t now, bool hinted,
             Accept& accept);

  std::deque<Entry> hinted_;
  std::deque<Entry> speculative_;
  std::unordered_set<uint64_t> queued_;
};

class Prefetchers {
 public:
  // neighbour_pages = 0 turns the neighbourhood prefetcher off.
  Prefetchers(uint32_t neighbour_pages, bool cross_layer)
      : neighbour_pages_(neighbour_pages), cross_layer_(cross_layer) {}
  // A fault on `page` of `region` (evidence for the next Expand); `from` is
  // where the page was (kUntouched: a first touch).
  void OnFault(const Region& region, uint32_t page, Tier from);
  // Turns the faults seen since the last call into candidates, layer-major
  // (every predicted page of the first sibling, then of the next ...), in the
  // order an engine's forward pass will want them.
  void Expand(const RegionIndex& index, uint32_t now, PrefetchQueue* queue);

 private:
  struct Trigger {
    RegionId region;
    size_t size;
    uint32_t page;
    bool populate;
  };
  struct GroupPage {
    size_t size;
    uint32_t page;
    bool operator==(const GroupPage&) const = default;
  };
  struct GroupPageHash {
    size_t operator()(const GroupPage& g) const { return g.size * 0x9E3779B97F4A7C15ull ^ g.page; }
  };

  const uint32_t neighbour_pages_;
  const bool cross_layer_;
  std::vector<Trigger> pending_;
  // (group, page) already expanded, and when: a fault on the next layer's copy
  // of the same offset adds nothing new.
  std::unordered_map<GroupPage, uint32_t, GroupPageHash> recent_;
};

// ---- template definitions ----

template <typename Accept>
bool PrefetchQueue::Drain(std::deque<Entry>* q, const RegionIndex& index, uint32_t now, bool hinted,
                          Accept& accept) {
  while (!q->empty()) {
    const Entry e = q->front();
    PageRef ref;
    bool expired = !hinted && now - e.added > kSpeculativeTtlTicks;
    if (expired || !Valid(index, e, &ref)) {
      queued_.erase(e.key);
      q->pop_front();
      continue;
    }
    if (!accept(ref)) return false;
    queued_.erase(e.key);
    q->pop_front();
  }
  return true;
}

template <typename Accept>
void PrefetchQueue::Take(const RegionIndex& index, uint32_t now, Accept&& accept) {
  if (Drain(&hinted_, index, now, true, accept)) Drain(&speculative_, index, now, false, accept);
}

}  // namespace kvtier
