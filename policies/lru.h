// LruPolicy: the baseline placement policy.
//
// Demotes the device pages whose last access signal is oldest once the device
// tier passes its high watermark, down to the low watermark; spills the
// coldest host pages to disk the same way when a disk tier exists; promotes
// pages hinted WILL_NEED while the device has room below its high watermark.
// "Access" is what the runtime can see (faults and hints; launch signals are
// collected but not used yet), the same evidence UVM's own eviction has.
// A tick costs O(signals + moves): every access signal appends (page, its
// last_access) to a queue in time order, and a demotion pops the queue's
// front, dropping entries a later access or a move made stale. Regions the
// policy has not seen yet are scanned once (their pages' state as they stand,
// coldest first); the queues are compacted when stale entries outnumber live
// ones. Thread-safety: policy thread only.
#pragma once

#include <deque>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "runtime/policy.h"

namespace kvtier {

class LruPolicy : public Policy {
 public:
  const char* name() const override { return "lru"; }
  void OnSignal(const Signal& signal, const Region& region) override;
  void Decide(const PolicyView& view, Decisions* out) override;

 private:
  struct Entry {
    RegionId region;
    uint32_t page;
    uint32_t stamp;  // the page's last_access when queued (device queue)
  };
  // Adds the pages of regions not seen before to the queues, coldest first.
  void Seed(const PolicyView& view);
  // Drops stale entries once they outnumber live ones (amortised O(1) per push).
  void Compact();
  bool LiveOnDevice(const Entry& e) const;
  Region* Find(RegionId id) const;
  // Pops entries of `q` for pages still on `from`, for which current(entry,
  // record) holds, into moves to `to` until they cover `bytes`; unmovable
  // ones stay at the front. A demotion queues the page for spilling.
  template <typename Current>
  uint64_t Drain(std::deque<Entry>* q, Tier from, Tier to, uint64_t bytes, Decisions* out,
                 Current&& current);

  std::unordered_map<RegionId, Region*> by_id_;  // this Decide's regions
  std::unordered_set<RegionId> seen_;
  std::deque<Entry> cold_;    // COLD hints: demoted first
  std::deque<Entry> device_;  // accesses, oldest first
  std::deque<Entry> host_;    // arrivals on the host, oldest first (spill order)
  std::deque<Entry> hinted_;  // WILL_NEED hints waiting for room
  size_t compact_at_ = 1 << 16;
};

}  // namespace kvtier
