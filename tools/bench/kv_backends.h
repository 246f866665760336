// The KvBackends of kvtier-bench multiround: where each compared system keeps
// the engine's KV and what moving it costs.
//
//  HbmBackend      hbm-only: the pool is the HBM left after weights and
//                  activations; a miss is recomputed (vLLM prefix caching).
//  OffloadBackend  explicit-offload (LMCache / vLLM OffloadingConnector
//                  style): the same HBM pool plus a CPU store in host memory,
//                  LRU, written through when a request finishes (copies off
//                  the critical path); a prefix found there is copied back
//                  before the request's prefill, synchronously: the step that
//                  starts it waits for the copy at the pinned-copy bandwidth.
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

#include "runtime/device/model/model_device.h"
#include "tools/bench/engine_model.h"
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

class OffloadBackend : public HbmBackend {
 public:
  OffloadBackend(const EngineConfig& engine, uint64_t pool_blocks, uint64_t store_bytes,
                 double link_bps, int shared_blocks);
  int ExternalHitBlocks(int session, int first, int max) override;
  void OnFinish(const Request& r) override;
  double RunStep(std::vector<Request*>& batch, double start_s, double overhead_s,
                 double compute_s) override;
  Occupancy Sample(double t) const override;
  MoveCounters counters() const override { return counters_; }

 private:
  uint64_t Key(int session, int index) const;
  const uint64_t capacity_blocks_;
  const double link_bps_;
  const int shared_blocks_;
  std::list<uint64_t> lru_;  // front: least recently used
  std::unordered_map<uint64_t, std::list<uint64_t>::iterator> store_;
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
