// AllocationMatcher: KVTIER_MATCH with alternatives and allocation-pattern
// terms, on top of MatchRule (match.h).
//
// Size alone cannot tell an engine's KV pool from its weights: vLLM's 1 GiB
// embedding and 224 MiB MLP weights are as large as its per-layer KV tensors,
// and llama.cpp keeps all weights in one buffer and all KV in another. What
// does tell them apart is the allocation pattern:
//   vLLM       allocates one KV tensor per layer, all the same size, one after
//              another, after the weights (whose sizes change from tensor to
//              tensor: qkv, o, gate_up, down, ...) and after the memory
//              profile (whose activations it frees again);
//   llama.cpp  allocates its weights buffer, then its KV buffer, then its
//              compute buffer, all from libggml-cuda.
// Grammar (a superset of match.h's; match.h's terms keep their meaning):
//   rule        := alternative (';' alternative)*   any alternative may hold
//   alternative := term (',' term)*                 all terms must hold
//   term        := size>=SIZE ... | index>=N ... | lib~TEXT | sym~TEXT | all | none
//                | run>=N    the allocation is at least the N-th of a run of
//                            consecutive allocations of exactly its size
//                | nth>=N  nth>N  nth<=N  nth<N
//                            its 0-based rank
//   where a run and a rank count only the allocations that pass the
//   alternative's other terms (so small allocations in between do not break
//   a run of KV tensors, and "nth" counts e.g. large allocations from one
//   library). Runs and ranks are decided as allocations arrive: the first
//   N-1 allocations of a run cannot be known to start one, and stay plain.
// kDefaultRule is the proposed default (see its comment).
// Thread-safety: Decide is safe from any thread (the stateless terms run
// without a lock; one mutex is held for the counts' few comparisons); the
// rest is immutable after Parse.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/match.h"
#include "runtime/mutex.h"
#include "runtime/status.h"

namespace kvtier {

// vLLM: runs of at least three equal allocations of 32 MiB or more (its
// per-layer KV tensors; no two consecutive vLLM weights of that size are
// equal, fused layers differ in shape, and 32 MiB is above PyTorch's 20 MiB
// segments, which do repeat). llama.cpp: an allocation of 1 MiB or more from
// libggml made under its KV cache's constructor (llama_kv_cache::
// llama_kv_cache allocates the one KV buffer of all layers; weights and
// compute buffers are allocated elsewhere), whatever the model's size and
// order of allocations. "llama_kv_cacheC" is the constructor in a mangled
// name (_ZN14llama_kv_cacheC1E...): the cache's other methods, which may
// allocate compute buffers (a K-shift), do not match. lib~ggml goes first so
// that other callers cost one dladdr, not a stack walk. Checked on the real
// CPU build (tests/engines/llama.cpp, well within CallSite::kFrames) and
// on replays; the CUDA build allocates through the same constructor.
inline constexpr const char* kDefaultRule =
    "size>=32M,run>=3;lib~ggml,sym~llama_kv_cacheC,size>=1M";

class AllocationMatcher {
 public:
  // What one decision found, for KVTIER_VERBOSE=2 logs.
  struct Decision {
    bool tier = false;
    int alternative = -1;  // the first alternative that held, or -1
    uint64_t run = 0;      // that alternative's run length, this allocation included
    uint64_t nth = 0;      // that alternative's rank of this allocation
  };

  // Fails with a message naming the bad term and the accepted form.
  static Result<AllocationMatcher> Parse(std::string_view text);
  AllocationMatcher() = default;
  AllocationMatcher(AllocationMatcher&& other) noexcept;
  AllocationMatcher& operator=(AllocationMatcher&& other) noexcept;

  // Decides about the allocation number `index` (0-based, process order) of
  // `size` bytes from `caller` (looked up only if a term needs it), and
  // records it in every alternative's runs and ranks.
  Decision Decide(uint64_t size, uint64_t index, CallSite& caller);
  bool needs_caller() const { return needs_caller_; }
  // The smallest size any alternative can match (MatchRule::MinSize).
  uint64_t min_size() const;
  size_t alternatives() const {
    MutexLock lock(&mu_);
    return alternatives_.size();
  }

 private:
  enum class Op { kGe, kGt, kLe, kLt };
  struct Count {
    bool is_run;  // run>=N, else nth
    Op op;
    uint64_t value;
  };
  static constexpr size_t kMaxAlternatives = 64;  // one bit each in Decide
  struct Alternative {
    std::vector<Count> counts;
    // Guarded by the matcher's mu_ (as part of alternatives_).
    uint64_t seen = 0;       // allocations that passed `base`
    uint64_t last_size = 0;  // size of the last of them
    uint64_t run = 0;        // equal sizes in a row, the last included
  };

  mutable Mutex mu_;
  std::vector<Alternative> alternatives_ GUARDED_BY(mu_);
  std::vector<MatchRule> bases_;  // each alternative's stateless terms; immutable after Parse
  bool needs_caller_ = false;
};

}  // namespace kvtier
