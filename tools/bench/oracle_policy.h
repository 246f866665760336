// OraclePolicy: Belady's eviction with perfect prefetch, the limit the
// transparent policies are measured against.
//
// It knows the future from the workload: when each session will next read
// its KV. Its device set is the pages of the sessions needed soonest, up to
// the high watermark (an engine with one KV tensor per layer reads a page
// offset in every layer at once, so it plans per page offset and moves that
// offset in every layer). It demotes the pages needed furthest in the future
// first and promotes the wanted pages soonest-needed first, limited only by
// the link: per tick, as many bytes as the link moves in a tick each way (so
// transfers queued for later sessions never delay a fault of the present).
// It works on the same device model, so it pays for the bytes it moves.
// Thread-safety: policy thread only.
#pragma once

#include <cstdint>
#include <unordered_set>
#include <vector>

#include "runtime/policy.h"

namespace kvtier::bench {

struct OracleSession {
  double next_use_s;            // infinity: never again
  std::vector<uint32_t> pages;  // pool page offsets holding the session's KV
};

class FutureSource {
 public:
  virtual ~FutureSource() = default;
  // Changes whenever the answer of Sessions may have changed.
  virtual uint64_t epoch() const = 0;
  virtual void Sessions(double now_s, std::vector<OracleSession>* out) = 0;
};

class OraclePolicy : public Policy {
 public:
  OraclePolicy(FutureSource* future, uint64_t tick_ns, double h2d_bps, double d2h_bps)
      : future_(future), tick_ns_(tick_ns), h2d_bps_(h2d_bps), d2h_bps_(d2h_bps) {}
  const char* name() const override { return "oracle"; }
  void Decide(const PolicyView& view, Decisions* out) override;

 private:
  void Replan(const PolicyView& view);
  // The next device page to demote, furthest next use first; false if none.
  bool NextVictim(const std::vector<Region*>& layers, Region** region, uint32_t* page);

  FutureSource* const future_;
  const uint64_t tick_ns_;
  const double h2d_bps_, d2h_bps_;
  uint64_t planned_epoch_ = UINT64_MAX;
  uint32_t planned_tick_ = 0;
  std::vector<uint32_t> want_;  // page offsets to hold, soonest first
  std::vector<uint32_t> drop_;  // the others that hold KV, furthest first
  std::unordered_set<uint32_t> keep_;
  size_t want_cursor_ = 0;  // want_[0, cursor) are resident in every layer
  size_t drop_cursor_ = 0;
  size_t drop_layer_ = 0;
};

}  // namespace kvtier::bench
