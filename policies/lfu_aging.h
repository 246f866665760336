// LfuAgingPolicy ("lfu-aging"): frequency with cooling, after HeMem.
//
// A page's heat counts its access signals (faults, hints) and halves every
// kHeatDecayTicks without one (ApplySignal keeps it; the decay is lazy), so a
// page hot an hour ago is not hot now. The victims are the device pages with
// the least decayed heat, the least recently accessed among equals: a one-off
// sweep (heat of one access) goes before pages that keep coming back. HeMem's
// hot/cold threshold is this ranking cut where the demotion stops.
// Prefetchers and refault protection come from TieringPolicy.
// Thread-safety: policy thread only.
#pragma once

#include "policies/page_state_map.h"
#include "policies/tiering_policy.h"

namespace kvtier {

class LfuAgingPolicy : public TieringPolicy {
 public:
  explicit LfuAgingPolicy(const TieringOptions& options = {}) : TieringPolicy(options) {}
  const char* name() const override { return "lfu-aging"; }

 protected:
  void OnResident(const Region& region, uint32_t page, Tier from, uint32_t now) override;
  bool BatchVictims() const override { return true; }
  uint32_t LastUse(const Region& region, uint32_t page) const override;
  void PickVictims(const PolicyView& view, uint64_t bytes, bool protect,
                   std::vector<PageRef>* out) override;

 private:
  // Heat counting a promotion at `arrived` as one more access.
  uint32_t Heat(const PageRecord& rec, uint32_t arrived, uint32_t now) const;

  PageStateMap<uint32_t> arrived_;  // tick of the last fault or promotion
};

}  // namespace kvtier
