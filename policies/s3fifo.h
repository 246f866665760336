// S3FifoPolicy ("s3fifo"): three static FIFO queues (Yang et al., SOSP'23).
//
// A page that arrives on the device enters the small FIFO (10% of the
// device), or the main FIFO if the ghost FIFO remembers it (it left the small
// queue recently and came back). Eviction takes from the small queue while it
// holds its share: a page accessed more than once there moves to main, the
// others leave (and are remembered in the ghost queue); from the main queue a
// page with accesses left gets another round (its count drops by one), the
// others leave. One-off pages therefore pass through the small queue only: a
// sweep does not flush main, the pages that keep coming back.
// Evidence of access is what the runtime sees: faults, hints, access signals
// (accesses to resident pages are invisible on a GPU), so a page that faults
// back while still queued counts as a hit.
// Prefetchers and refault protection come from TieringPolicy.
// Thread-safety: policy thread only.
#pragma once

#include <deque>

#include "policies/page_state_map.h"
#include "policies/tiering_policy.h"

namespace kvtier {

class S3FifoPolicy : public TieringPolicy {
 public:
  explicit S3FifoPolicy(const TieringOptions& options = {}) : TieringPolicy(options) {}
  const char* name() const override { return "s3fifo"; }

  // Share of the device the small queue holds (the paper's 10%).
  static constexpr double kSmallShare = 0.10;

 protected:
  void OnResident(const Region& region, uint32_t page, Tier from, uint32_t now) override;
  void OnAccess(const Region& region, uint32_t page, uint32_t now) override;
  void PickVictims(const PolicyView& view, uint64_t bytes, bool protect,
                   std::vector<PageRef>* out) override;

 private:
  enum class Where : uint8_t { kNone, kSmall, kMain, kGhost };
  struct State {
    Where where = Where::kNone;
    uint8_t freq = 0;
    uint32_t stamp = 0;  // matches the page's live queue entry
  };
  struct Entry {
    uint64_t key;
    uint32_t stamp;
  };
  void Enqueue(std::deque<Entry>* q, State& st, Where where, uint64_t key);
  void Leave(State& st);
  // The live entry at the front of `q` (stale ones dropped), or null.
  State* Front(std::deque<Entry>* q, Where where, Entry* entry);
  void TrimGhost(size_t capacity);

  PageStateMap<State> state_;
  std::deque<Entry> small_, main_, ghost_;
  size_t small_count_ = 0, main_count_ = 0, ghost_count_ = 0;
};

}  // namespace kvtier
