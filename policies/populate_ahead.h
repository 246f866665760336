// PopulateAhead: predictive's book of the blocks it populates ahead of a
// first touch (predictive.h, "First touches").
//
// An allocator hands out a fresh pool in order, so the blocks after a first
// touch are the ones written next, by this request or the next: populating
// them on the device spares a population fault in every layer. The engine
// then writes such a block without a fault, so no access group may ever
// claim it. The book keeps those blocks, oldest first, so the policy can
// reclaim them, and, per region, the allocator's front: one past the latest
// block first touched. A block behind the front has been handed out (it
// holds a session's latest KV); one past it may never be.
//
// Blocks are slots (PageKey of the first layer's region and the page). The
// book knows no tiers or groups: its caller says which blocks are still
// unclaimed when they are populated.
// Thread-safety: none; the policy's tick serialises it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <unordered_map>
#include <vector>

#include "policies/page_state_map.h"
#include "runtime/page_table.h"

namespace kvtier {

class PopulateAhead {
 public:
  static constexpr size_t kDefaultMaxQueued = size_t{1} << 20;

  explicit PopulateAhead(size_t max_queued = kDefaultMaxQueued) : max_queued_(max_queued) {}

  // A first touch of `page` in `region` (the first layer's), which has
  // `region_pages` pages: appends to `ahead` the next `blocks` slots within
  // the region, and queues for reclaim, once each, those for which
  // `unclaimed(page)` is true (no group holds it and it is untouched). The
  // oldest queued slot goes when more than the book's maximum are queued.
  template <typename Unclaimed>
  void OnFirstTouch(RegionId region, uint32_t page, uint32_t region_pages, uint32_t blocks,
                    Unclaimed unclaimed, std::vector<uint64_t>* ahead) {
    Fronts& fronts = fronts_[region];
    if (page + 1 > fronts.written) fronts.written = page + 1;
    for (uint32_t d = 1; d <= blocks && page + d < region_pages; ++d) {
      const uint32_t next = page + d;
      ahead->push_back(PageKey(region, next));
      // A prefill's first touches overlap in what they populate ahead.
      if (next >= fronts.queued && unclaimed(next)) {
        queued_.push_back(PageKey(region, next));
        fronts.queued = next + 1;
      }
    }
    if (queued_.size() > max_queued_) {
      queued_.pop_front();
      front_layer_ = 0;
    }
  }

  bool empty() const { return queued_.empty(); }
  size_t size() const { return queued_.size(); }
  // The oldest queued slot. Not empty().
  uint64_t front() const { return queued_.front(); }
  // Whether the allocator has handed `slot` out: a first touch in its
  // region came at or past it.
  bool HandedOut(uint64_t slot) const {
    const auto it = fronts_.find(KeyRegion(slot));
    return it != fronts_.end() && KeyPage(slot) < it->second.written;
  }
  // The layer the front slot's reclaim has come to (the caller walks the
  // layers, one demotion at a time, across ticks).
  uint32_t& front_layer() { return front_layer_; }
  // The front slot is done with: claimed by a group, gone, or reclaimed in
  // every layer.
  void PopFront() {
    queued_.pop_front();
    front_layer_ = 0;
  }

 private:
  struct Fronts {
    uint32_t written = 0;  // one past the latest block first touched
    uint32_t queued = 0;   // one past the latest block queued
  };
  const size_t max_queued_;
  std::unordered_map<RegionId, Fronts> fronts_;
  std::deque<uint64_t> queued_;
  uint32_t front_layer_ = 0;
};

}  // namespace kvtier
