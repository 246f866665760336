// TieringPolicy: the decision loop shared by lfu-aging, s3fifo and cost-aware.
//
// Each tick it (1) turns the faults and hints seen since the last tick into
// prefetch candidates (prefetch.h), (2) plans promotions within the up
// channel's budget, (3) demotes enough victims within the down channel's
// budget to keep the device under its high watermark with those promotions
// in (down to the low watermark once it is crossed), (4) spills host pages to
// disk when the host tier passes its high watermark. A promotion beyond the
// device's free room is a swap: a victim's demotion goes with it (kRoom), and
// a promotion out of the host gives its host room to that victim, so a full
// host tier never stops the policy. Promotions are kDemand: they answer a
// fault or a hint of the engine's current work.
// Subclasses only rank pages: which device page to demote first, and what a
// fault or promotion means for their bookkeeping.
//
// A ranking that needs a pass over all pages (BatchVictims) picks victims in
// batches of up to (high - low) watermark bytes, and later ticks consume that
// reserve while its pages stay cold (same last_access, still movable); queue
// and heap rankings pick exactly what a tick demotes.
// Refault protection: a page whose fault was a refault (ApplySignal counted
// one: it came back soon after leaving) is not a victim for protect_ticks
// after it, unless nothing else is left and the device is over its high
// watermark.
// Thread-safety: policy thread only.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "policies/lru.h"
#include "policies/page_state_map.h"
#include "policies/policy_util.h"
#include "policies/prefetch.h"
#include "runtime/policy.h"

namespace kvtier {

struct TieringOptions {
  uint32_t neighbour_pages = 2;  // fault-neighbourhood depth; 0 = off
  bool cross_layer = true;       // cross-layer correlation prefetcher
  bool refault_protection = true;
  uint32_t protect_ticks = 1000;  // a refaulted page is protected this long after the refault
};

class TieringPolicy : public Policy {
 public:
  explicit TieringPolicy(const TieringOptions& options)
      : options_(options), prefetchers_(options.neighbour_pages, options.cross_layer) {}

  void OnSignal(const Signal& signal, const Region& region) final;
  void Decide(const PolicyView& view, Decisions* out) final;

 protected:
  // `page` became or is becoming resident: by a fault (`fault`), a first
  // touch (a fault from kUntouched) or this policy's promotion. `now` is the
  // current tick.
  virtual void OnResident(const Region& region, uint32_t page, Tier from, uint32_t now) = 0;
  // Other access evidence on a page (an access or WILL_NEED signal).
  virtual void OnAccess(const Region& region, uint32_t page, uint32_t now) {}
  // Appends device pages to demote, best victim first, until they cover
  // `bytes` or none are left. Only pages for which Eligible(rec, now,
  // protect) holds may be returned.
  virtual void PickVictims(const PolicyView& view, uint64_t bytes, bool protect,
                           std::vector<PageRef>* out) = 0;
  // The policy demotes the page now.
  virtual void OnDemote(const Region& region, uint32_t page) {}
  // True for rankings that scan every page: victims are then picked in
  // batches (see above). Such a ranking must keep no per-victim state.
  virtual bool BatchVictims() const { return false; }
  // When the page was last used as far as the ranking knows (a reserved
  // victim used since is no victim any more).
  virtual uint32_t LastUse(const Region& region, uint32_t page) const {
    return region.pages[page].last_access;
  }
  // May the host page go to disk? (cost-aware: only when a restore from disk
  // costs less than recomputing it.)
  virtual bool MaySpill(const Region& region, uint32_t page) const { return true; }

  // On the device, not pinned, not moving; with `protect`, not protected
  // against refaults either.
  bool Eligible(const Region& region, uint32_t page, uint32_t now, bool protect) const;

  const TieringOptions options_;

 private:
  struct Reserved {
    PageRef ref;
    uint32_t last_use;  // LastUse when it was picked; a use since disqualifies it
    bool protect;       // picked while refault-protected pages were excluded
  };
  // Victims covering `bytes`, from the reserve, refilled as needed; pages
  // under refault protection cover at most `hard` of them (what must go to
  // keep the device under its high watermark), never room for a prefetch or
  // the way down to the low watermark.
  std::vector<PageRef> TakeVictims(const PolicyView& view, uint64_t bytes, uint64_t hard);
  void Spill(const PolicyView& view, uint64_t budget, Decisions* out);

  Prefetchers prefetchers_;
  PrefetchQueue queue_;
  RegionIndex index_;
  std::deque<Reserved> reserve_;
  std::deque<uint64_t> demoted_;  // PageKeys in demotion order: spill candidates
  // Spill's scan of every host page, paced: what a fruitless scan leaves
  // (cost-aware's gate may refuse every page) is not scanned again each tick.
  ScanBackoff spill_scan_;
  // Where the scan for pages the ranking never saw goes on from: each call
  // looks at a bounded number of pages, so no tick walks them all.
  RegionId unseen_region_ = 0;
  uint32_t unseen_page_ = 0;
  struct Protection {
    uint16_t refaults_seen = 0;
    uint32_t until = 0;  // protected before this tick
  };
  PageStateMap<Protection> protection_;
};

}  // namespace kvtier
