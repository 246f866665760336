// CostAwarePolicy ("cost-aware"): GreedyDual-Size-Frequency over restore cost.
//
// Every device page carries a priority H = L + f * c: c is what it costs to
// get the page back if it leaves (a fault-driven restore from the host, more
// for a page that has refaulted), f its decayed access count, and L an
// inflation value that rises to the H of each victim, so pages not used for
// a while sink below newly used ones (ageing without a clock). The victim is
// the page of least H, the least recently ranked among equals. Pages all have
// one size, so H needs no size term.
// Offload only when transfer costs less than recompute: a page whose restore
// from the host would cost more than the engine recomputing its KV is kept
// on the device while anything else can go, and a host page goes to disk only
// when a restore from disk is still cheaper than recomputing it.
// Prefetchers and refault protection come from TieringPolicy.
// Thread-safety: policy thread only.
#pragma once

#include <queue>
#include <vector>

#include "policies/page_state_map.h"
#include "policies/tiering_policy.h"

namespace kvtier {

// Per-byte costs (ns per byte moved or rebuilt) and per-page latencies.
// Defaults: PCIe Gen5 x16 with fault-driven migration at half of the ~50 GB/s
// a prefetch achieves, a Gen4 NVMe SSD (7 GB/s read), and Llama-3.1-8B
// prefill on an H200 (2 x 8.03e9 FLOP per token at ~396 TFLOP/s over 128 KiB
// of KV per token). kvtier-bench passes the figures of its hardware profile.
struct RestoreCosts {
  double host_ns_per_byte = 1e9 / 25e9;
  // Fault service latency per 2 MiB VA block: pages of one block share it.
  uint64_t host_latency_ns = 30'000;
  double disk_ns_per_byte = 1e9 / 7e9 + 1e9 / 25e9;
  uint64_t disk_latency_ns = 100'000;
  double recompute_ns_per_byte = (2 * 8.03e9 / 396e12) * 1e9 / 131072.0;
};

class CostAwarePolicy : public TieringPolicy {
 public:
  explicit CostAwarePolicy(const TieringOptions& options = {}, const RestoreCosts& costs = {})
      : TieringPolicy(options), costs_(costs) {}
  const char* name() const override { return "cost-aware"; }

 protected:
  void OnResident(const Region& region, uint32_t page, Tier from, uint32_t now) override;
  void OnAccess(const Region& region, uint32_t page, uint32_t now) override;
  void PickVictims(const PolicyView& view, uint64_t bytes, bool protect,
                   std::vector<PageRef>* out) override;
  bool MaySpill(const Region& region, uint32_t page) const override;

 private:
  struct State {
    double h = 0;
    uint32_t version = 0;  // 0: never ranked
  };
  struct Entry {
    double h;
    uint64_t seq;  // ranking order: among equal priorities the older goes first
    uint64_t key;
    uint32_t version;
    bool operator>(const Entry& o) const { return h != o.h ? h > o.h : seq > o.seq; }
  };
  void Rank(const Region& region, uint32_t page, uint32_t now);
  double HostRestoreNs(const Region& region, uint32_t page) const;
  double RecomputeNs(const Region& region, uint32_t page) const;

  const RestoreCosts costs_;
  double inflation_ = 0;  // L
  PageStateMap<State> state_;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap_;
  size_t ranked_ = 0;  // pages with a live entry (bounds the heap)
  uint64_t seq_ = 0;
};

}  // namespace kvtier
