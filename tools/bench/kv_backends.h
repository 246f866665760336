// The KvBackends of kvtier-bench multiround: where each compared system keeps
// the engine's KV and what moving it costs.
//
//  HbmBackend      hbm-only: the pool is the HBM left after weights and
//                  activations; a miss is recomputed (vLLM prefix caching).
//  OffloadBackend  explicit-offload (LMCache / vLLM OffloadingConnector
//                  style): the same HBM pool plus a CPU store in host memory,
//                  LRU, written through when a request finishes (copies off
//                  the critical path), and with a disk budget a disk store
//                  the CPU store's evictions go to (LMCache's local disk
//                  backend); a prefix found there is copied back before the
//                  request's prefill, synchronously: the step that starts it
//                  waits for the SSD reads, then for the copy at the
//                  pinned-copy bandwidth. Layerwise (LMCache's use_layerwise):
//                  layer l+1's copy runs while layer l computes.
//  PagedBackend    uvm-default, kvtier:<policy>, kvtier:hints and oracle: an
//                  oversubscribed pool (device budget + host tier) in one
//                  region per layer on a ModelDevice; each step touches the
//                  pages of its requests layer by layer (faults stall the
//                  layer), and a VirtualTicker runs the runtime's tick engine
//                  between layers.
//                  With hints, the scheduler hints WILL_NEED on the pages of
//                  the requests of the step it is about to run.
// Thread-safety: none.
#pragma once

#include <list>
#include <memory>
#include <unordered_map>
#include <vector>

#include "tools/bench/engine_model.h"
#include "tools/bench/model_device.h"
#include "tools/bench/virtual_ticker.h"

namespace kvtier::bench {

class HbmBackend : public KvBackend {
 public:
  HbmBackend(const EngineConfig& engine, uint64_t pool_blocks)
      : block_bytes_(engine.block_bytes()), pool_blocks_(pool_blocks) {}
  uint64_t pool_blocks() const override { return pool_blocks_; }
  void Attach(EngineModel* engine) override { engine_ = engine; }
  double RunStep(std::vector<Request*>& batch, double start_s, double overhead_s,
                 double compute_s) override {
    return start_s + overhead_s + compute_s;
  }
  Occupancy Sample(double t) const override;
  MoveCounters counters() const override { return {}; }

 protected:
  const double block_bytes_;
  const uint64_t pool_blocks_;
  EngineModel* engine_ = nullptr;
};

struct OffloadConfig {
  uint64_t cpu_bytes = 0;   // the CPU store (the host budget)
  uint64_t disk_bytes = 0;  // the disk store (the disk budget); 0: none
  double link_bps = 0;      // pinned copies, host to device
  double ssd_read_bps = 0;
  double ssd_write_bps = 0;
  bool layerwise = false;
  int shared_blocks = 0;  // the shared system prompt's blocks (one owner)
};

class OffloadBackend : public HbmBackend {
 public:
  OffloadBackend(const EngineConfig& engine, uint64_t pool_blocks, const OffloadConfig& config);
  int ExternalHitBlocks(int session, int first, int max, int* on_disk) override;
  void OnFinish(const Request& r) override;
  double RunStep(std::vector<Request*>& batch, double start_s, double overhead_s,
                 double compute_s) override;
  Occupancy Sample(double t) const override;
  MoveCounters counters() const override { return counters_; }

 private:
  // One tier of the store: blocks by key, least recently used at the front.
  struct Store {
    uint64_t capacity = 0;
    std::list<uint64_t> lru;
    std::unordered_map<uint64_t, std::list<uint64_t>::iterator> where;
    bool Has(uint64_t key) const { return where.count(key) > 0; }
    void Touch(uint64_t key) { lru.splice(lru.end(), lru, where.at(key)); }
    void Erase(uint64_t key);
    // Inserts `key`; returns the key it evicted, or UINT64_MAX.
    uint64_t Insert(uint64_t key);
  };
  uint64_t Key(int session, int index) const;
  void StoreInCpu(uint64_t key);

  const OffloadConfig config_;
  const int layers_;
  Store cpu_, disk_;
  MoveCounters counters_;
};

class PagedBackend : public KvBackend, public DeviceEvents {
 public:
  // `policy` null: no policy (uvm-default).
  PagedBackend(const EngineConfig& engine, const ModelCosts& costs, uint64_t pool_blocks,
               size_t page_size, std::unique_ptr<Policy> policy, const TickEngineConfig& tick,
               bool hints);
  // Creates the per-layer regions; fails when a block does not fit a page.
  Status Init();

  uint64_t pool_blocks() const override { return pool_blocks_; }
  uint32_t blocks_per_page() const override { return blocks_per_page_; }
  void Attach(EngineModel* engine) override { engine_ = engine; }
  void OnFinish(const Request& r) override;
  void ClassifyHits(Request& r, int hit_blocks, int block_tokens) override;
  double RunStep(std::vector<Request*>& batch, double start_s, double overhead_s,
                 double compute_s) override;
  void RunUntil(double t) override;
  Occupancy Sample(double t) const override;
  MoveCounters counters() const override;

  // DeviceEvents: forwarded to the tick driver.
  void OnFault(Region& region, uint32_t page, Tier from, uint64_t wait_ns) override;
  void OnDriverEviction(Region& region, uint32_t page) override;

 private:
  void Hint(const std::vector<uint32_t>& pages, uint64_t t_ns);

  const EngineConfig engine_config_;
  const uint64_t pool_blocks_;
  const size_t page_size_;
  const bool hints_;
  uint32_t blocks_per_page_ = 0;
  ModelDevice device_;
  VirtualTicker driver_;
  std::vector<RegionPtr> layers_;
  EngineModel* engine_ = nullptr;
};

inline uint64_t Ns(double s) { return s <= 0 ? 0 : static_cast<uint64_t>(s * 1e9 + 0.5); }

}  // namespace kvtier::bench
