// EngineModel: a vLLM-like serving engine on a virtual clock.
//
// Paged KV in blocks of block_tokens (one KV tensor per layer, so a block is
// block_tokens x KV bytes per token per layer in every layer's tensor),
// prefix caching per session (a returning session's prompt hits the leading
// blocks of its history that are still cached; freed blocks stay cached in a
// free queue and the allocator evicts from its head, least recently freed
// first, a finished request's last block first - vLLM V1's order), a
// continuous-batching scheduler (running requests first, then waiting ones
// FCFS, up to max_num_seqs and max_batched_tokens per step with chunked
// prefill; when blocks run out the last running request is preempted and
// recomputed later), and a roofline step cost:
//   flops = 2 P (prefill + decode tokens) + 4 L Hq n (c + n/2) per prefill
//           chunk of n tokens after c + 4 L Hq ctx per decode
//   bytes = weights + KV read and written
//   time  = overhead + max(flops / achieved FLOP/s, bytes / achieved HBM B/s)
// Where the KV lives and what moving it costs is the KvBackend's business:
// the engine calls it to size the pool, to find hits outside HBM and to run
// each step. Thread-safety: none (one simulation per thread).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "tools/bench/hw_profile.h"
#include "tools/bench/workload.h"

namespace kvtier::bench {

struct EngineConfig {
  ModelShape shape;
  int tp = 1;
  int block_tokens = 16;
  int max_num_seqs = 256;
  int max_batched_tokens = 8192;
  double prefill_flops = 0;  // achieved FLOP/s in prefill (per GPU)
  double hbm_bps = 0;        // achieved memory bandwidth (per GPU)
  double step_overhead_s = 0;
  // Admission by device fit: a request joins the running set only while the
  // running requests' KV (prompt + answer) stays within this many tokens, or
  // when nothing runs. 0: no limit beyond the pool (vLLM's own rule).
  double running_kv_limit_tokens = 0;

  double kv_bytes_per_token() const { return shape.KvBytesPerToken(tp); }
  double block_bytes() const { return kv_bytes_per_token() * block_tokens; }
  double block_bytes_per_layer() const { return block_bytes() / shape.layers; }
  double weight_bytes() const { return shape.params * shape.dtype_bytes / tp; }
};

struct Request {
  int id = 0;
  int session = 0;
  int user_id = 0;
  int question_id = 0;
  int prompt_tokens = 0;
  int answer_tokens = 0;
  bool measured = false;
  bool returning = false;  // Launch::returning
  double launch_s = 0;
  double first_token_s = -1;
  double finish_s = -1;

  int computed = 0;        // tokens whose KV exists on the engine's blocks
  int prefill_target = 0;  // tokens to (re)compute before decoding
  int generated = 0;
  bool admitted = false;
  int preemptions = 0;
  std::vector<int32_t> blocks;  // block table
  std::vector<uint32_t> pages;  // distinct pool pages of `blocks` (paged backends), sorted
  int cached_blocks = 0;        // leading blocks registered as cached

  double reserved_tokens = 0;  // its share of running_kv_tokens_
  // Where the prompt's KV came from, in tokens (decided at first admission).
  int hit_device = 0, hit_host = 0, hit_disk = 0, recomputed = 0;
  bool hits_recorded = false;
  int pending_load_blocks = 0;  // explicit offload: blocks to copy in before the step
  int pending_disk_blocks = 0;  // ... of which the store holds on disk

  // Paged backends: the pages were all resident at this residency epoch.
  uint64_t verified_epoch = UINT64_MAX;
  size_t verified_pages = 0;
};

struct Occupancy {
  double t = 0;
  uint64_t device = 0, host = 0, disk = 0;
};

// Counters every backend fills (bytes per boundary and cause).
struct MoveCounters {
  uint64_t h2d_fault = 0, h2d_prefetch = 0, h2d_load = 0;
  uint64_t d2h_demote = 0, d2h_evict = 0, d2h_store = 0;
  uint64_t disk_read = 0, disk_write = 0;
  uint64_t faults = 0, driver_evictions = 0, refaults = 0, policy_ticks = 0;
};

class EngineModel;

class KvBackend {
 public:
  virtual ~KvBackend() = default;
  // Blocks in the engine's pool (what the engine believes it may allocate).
  virtual uint64_t pool_blocks() const = 0;
  // Blocks per pool page for backends that track pages; 0 otherwise.
  virtual uint32_t blocks_per_page() const { return 0; }
  virtual void Attach(EngineModel* engine) {}
  // Leading blocks from `first` on that the backend holds outside the
  // engine's cache (explicit offload's CPU and disk store), at most `max`;
  // `on_disk` gets how many of them are on disk.
  virtual int ExternalHitBlocks(int session, int first, int max, int* on_disk) {
    *on_disk = 0;
    return 0;
  }
  // The engine evicted cached block `index` of a session (-1: the shared prefix).
  virtual void OnEvict(int session, int index) {}
  virtual void OnFinish(const Request& r) {}
  // Tokens of the first `hit_blocks` blocks of `r` by the tier holding them.
  virtual void ClassifyHits(Request& r, int hit_blocks, int block_tokens) {}
  // Runs one step of `batch` starting at `start_s`: overhead, then compute
  // split evenly across layers; returns its end time.
  virtual double RunStep(std::vector<Request*>& batch, double start_s, double overhead_s,
                         double compute_s) = 0;
  // Background work (policy ticks) up to `t`.
  virtual void RunUntil(double t) {}
  virtual Occupancy Sample(double t) const = 0;
  virtual MoveCounters counters() const = 0;
};

class EngineModel {
 public:
  EngineModel(const EngineConfig& config, KvBackend* backend, int shared_prefix_tokens);

  void Submit(const Launch& launch);
  // Time at which the engine next does something: now if it is idle with
  // work, the end of the running step, or Workload::kNever.
  double NextStepTime() const { return next_step_s_; }
  // Runs the step due at `t`; appends the requests that finished.
  void Step(double t, std::vector<Request*>* finished);

  const EngineConfig& config() const { return config_; }
  const std::vector<std::unique_ptr<Request>>& requests() const { return requests_; }
  uint64_t blocks_in_use() const { return pool_.size() - free_count_; }
  // Blocks holding KV: in use, or free but still cached.
  uint64_t resident_blocks() const { return blocks_in_use() + free_cached_; }
  int64_t rejected() const { return rejected_; }
  uint64_t cached_blocks() const { return cached_count_; }
  int64_t preemptions() const { return preemptions_; }

  // Step cost in seconds (after the fixed overhead) of the items in `work`.
  struct Work {
    Request* r;
    int n;        // tokens processed
    int context;  // tokens before them
    bool prefill;
  };
  double ComputeSeconds(const std::vector<Work>& work) const;

 private:
  struct Block {
    int32_t ref = 0;
    int32_t owner = -1;  // session; kShared for the shared prefix
    int32_t index = -1;  // block index in the owner's sequence
    int32_t prev = -1, next = -1;
    bool cached = false;
    bool in_free = false;
  };
  static constexpr int32_t kShared = -2;

  int32_t BlockAt(int session, int index) const;
  void SetChain(int session, int index, int32_t block);
  int CachedPrefix(int session, int max_blocks) const;
  void FreeQueuePush(int32_t b);
  void FreeQueueRemove(int32_t b);
  int32_t Allocate();
  void Ref(int32_t b);
  void Unref(int32_t b);
  void AddBlock(Request* r, int32_t b);
  // Blocks to reach `tokens` tokens of KV.
  int BlocksFor(int tokens) const {
    return (tokens + config_.block_tokens - 1) / config_.block_tokens;
  }
  bool Admit(Request* r, int budget, std::vector<Work>* work);
  bool EnsureBlocks(Request* r, int tokens);
  void Preempt(Request* r);
  void ReleaseBlocks(Request* r);
  void RegisterFull(Request* r);

  const EngineConfig config_;
  KvBackend* const backend_;
  const int shared_blocks_;
  std::vector<Block> pool_;
  int32_t free_head_ = -1, free_tail_ = -1;
  uint64_t free_count_ = 0;
  uint64_t free_cached_ = 0;
  int64_t rejected_ = 0;
  uint64_t cached_count_ = 0;
  std::vector<int32_t> shared_chain_;
  std::vector<std::vector<int32_t>> chains_;  // per session: blocks after the shared prefix
  std::vector<std::unique_ptr<Request>> requests_;
  std::deque<Request*> waiting_;
  std::vector<Request*> running_;
  double next_step_s_ = Workload::kNever;
  int64_t preemptions_ = 0;
  double running_kv_tokens_ = 0;  // reserved by running requests (running_kv_limit_tokens)
};

}  // namespace kvtier::bench
