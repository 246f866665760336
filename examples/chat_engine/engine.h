// Engine: a small multi-session chat server's KV cache, the way vLLM lays it
// out, with a deterministic scheduler.
//
// The KV cache is one device tensor per layer, each split into the same
// number of blocks; a block id names the same slot in every layer. Sessions
// arrive, run a turn (prefill: read the cached context, write the prompt
// blocks; then decode steps: read every block of the session in every layer,
// append one block), go idle for a few steps and return for the next turn.
// At most max_active sessions run per step. When the pool has no free block,
// the least recently used idle session loses its blocks and must prefill its
// whole context again when it returns (a recompute); when no session is idle,
// the session that needs the block is preempted (the same, counted apart).
// Every block read is checked against what was written. With `park` it
// tells kvtier which sessions are idle (KVTIER_HINT_DORMANT), as an engine's
// connector would.
// Thread-safety: single-threaded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kv_access.h"

namespace chat {

struct EngineConfig {
  int layers = 8;
  int64_t blocks = 128;  // per layer
  size_t block_bytes = 256 << 10;
  int sessions = 16;
  int max_active = 4;
  int turns = 3;
  int prompt_blocks = 6;
  int gen_blocks = 4;
  int think_steps = 8;  // an idle session returns after 1..think_steps steps
  uint64_t seed = 1;
  // Cooperate with kvtier (kvtier.h, found at run time: without the preload
  // it does nothing): an idle session's blocks are hinted
  // KVTIER_HINT_DORMANT, and kvtier_wait brings them back before the session
  // runs again; blocks freed for reuse are woken (KVTIER_HINT_WILL_NEED).
  bool park = false;
};

struct EngineStats {
  int64_t sessions_served = 0;
  int64_t turns = 0;
  int64_t steps = 0;
  int64_t blocks_read = 0;     // session blocks, each in every layer
  int64_t blocks_written = 0;  // likewise
  int64_t recomputes = 0;      // returning sessions whose cache had been evicted
  int64_t recompute_blocks = 0;
  int64_t preemptions = 0;
  int64_t evictions = 0;            // idle sessions whose blocks were taken
  int64_t checks_passed = 0;        // block x layer verifications
  int64_t parked = 0;               // idle sessions hinted dormant (--park)
  int64_t kvtier_calls_failed = 0;  // hints or waits kvtier refused
};

class Engine {
 public:
  // `kv[l]` is layer l's tensor of config.blocks * config.block_bytes bytes.
  Engine(const EngineConfig& config, std::vector<void*> kv, KvAccess* access);

  // Checks that the pool can hold one session's whole context.
  static bool Validate(const EngineConfig& config, std::string* error);

  // Runs every session to completion. False on a device error or a failed
  // check; `error` says what and where.
  bool Run(std::string* error);
  // After Run failed: true when a check failed (not a device call).
  bool integrity_failed() const { return integrity_failed_; }
  const EngineStats& stats() const { return stats_; }

 private:
  enum class State { kWaiting, kRunning, kDone };
  struct Session {
    uint32_t id = 0;
    State state = State::kWaiting;
    std::vector<int32_t> blocks;  // pool block ids, in context order
    int context = 0;              // context length in blocks (kept when evicted)
    int turn_start_context = 0;   // context before the current turn (preemption resets to it)
    int turns_done = 0;
    int gen_left = 0;
    int64_t ready_step = 0;  // waiting: returns at this step
    int64_t last_used = 0;   // LRU order for eviction
  };
  struct BlockOwner {
    uint32_t session = 0;
    uint32_t index = 0;
    uint64_t generation = 0;
  };

  bool StartTurn(Session& s, bool* started, std::string* error);
  bool DecodeStep(Session& s, std::string* error);
  void EndTurn(Session& s);
  // Takes a free block, evicting an idle session if needed; -1 when none.
  int32_t AllocBlock(const Session& requester);
  bool MakeRoom(size_t blocks, const Session& requester);
  void ReleaseBlocks(Session& s);
  bool WriteBlock(Session& s, std::string* error);         // appends one block
  bool ReadSession(const Session& s, std::string* error);  // checks all blocks
  // --park: every layer's copy of the blocks, hinted or waited for.
  void Park(const Session& s);
  void Unpark(const std::vector<int32_t>& blocks, bool wait);
  uint8_t* BlockAddr(int layer, int32_t block) const;
  uint64_t Random(uint64_t bound);  // [0, bound)

  const EngineConfig config_;
  const std::vector<void*> kv_;
  KvAccess* const access_;
  std::vector<Session> sessions_;
  std::vector<int32_t> free_;
  std::vector<BlockOwner> owner_;
  uint64_t generation_ = 0;
  uint64_t rng_;
  int64_t step_ = 0;
  EngineStats stats_;
  bool integrity_failed_ = false;
};

}  // namespace chat
