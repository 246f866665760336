// LruPolicy: the baseline placement policy.
//
// Demotes the device pages whose last access signal is oldest once the device
// tier passes its high watermark, down to the low watermark; spills the
// coldest host pages to disk the same way when a disk tier exists; promotes
// pages hinted WILL_NEED while the device has room below its high watermark.
// "Access" is what the runtime can see (faults, launches, hints), the same
// evidence UVM's own eviction has. Thread-safety: policy thread only.
#pragma once

#include "runtime/policy.h"

namespace kvtier {

class LruPolicy : public Policy {
 public:
  const char* name() const override { return "lru"; }
  void OnSignal(const Signal& signal, const Region& region) override;
  void Decide(const PolicyView& view, Decisions* out) override;

 private:
  // A WILL_NEED hint arrived and may still wait for room: only then does
  // Decide scan every page for hinted ones.
  bool hints_pending_ = false;
};

// Shared building blocks for policies: collect the candidate pages of one
// tier ordered by a key, and emit moves until enough bytes leave the tier.
// Pages on `tier` that are neither pinned nor in flight.
std::vector<PageRef> MovablePages(const PolicyView& view, Tier tier);
// Emits moves of `pages` (in order) to `to` until `bytes_to_free` bytes are
// covered; returns the bytes covered.
uint64_t EmitMoves(const std::vector<PageRef>& pages, Tier to, uint64_t bytes_to_free,
                   Decisions* out);
// Bytes that must leave a tier: used - low once used passes high, else 0.
uint64_t BytesOverWatermark(const TierUsage& usage);

}  // namespace kvtier
