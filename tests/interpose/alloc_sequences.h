// Allocation sequences of real engines, replayed by the match tests.
//
// Each is the order and sizes of the device allocations an engine makes, as
// its allocator hands them to cudaMalloc (sizes as the allocator rounds them):
//
// VllmLike: vLLM serving Llama-3-8B in bf16 through PyTorch's caching
//   allocator (blocks above 1 MiB rounded to 2 MiB, small tensors from 2 MiB
//   segments, 1-10 MiB tensors from 20 MiB segments). Weights in module
//   order: a 1 GiB embedding, a 32 MiB rotary cache, then per layer qkv
//   (48 MiB), o_proj (32 MiB), gate_up (224 MiB), down (112 MiB) and norms
//   from small segments, then the 1 GiB lm_head. Then the memory profile:
//   activations for 8192 tokens (two 64 MiB hidden-state buffers in a row),
//   a cuBLAS workspace, sampler logits; all freed again (empty_cache). Then
//   one KV tensor per layer (torch.zeros, int8), all the same size.
// LlamaCppLike: llama.cpp (libggml-cuda) with an 8B Q4_K_M model, all layers
//   on the GPU: one weights buffer, then the KV buffer (one for all layers),
//   then the compute buffer; then the legacy pool's scratch buffers during
//   prompt processing (dequantised weight tiles of many sizes).
// Thread-safety: constant data.
#pragma once

#include <cstdint>
#include <vector>

namespace kvtier::replay {

constexpr uint64_t kMiB = uint64_t{1} << 20;

enum class Role { kWeight, kActivation, kKv, kCompute, kScratch };
inline const char* RoleName(Role r) {
  switch (r) {
    case Role::kWeight:
      return "weight";
    case Role::kActivation:
      return "activation";
    case Role::kKv:
      return "kv";
    case Role::kCompute:
      return "compute";
    case Role::kScratch:
      return "scratch";
  }
  return "?";
}

struct Step {
  bool free = false;  // free the allocation made by step `target`
  uint64_t bytes = 0;
  Role role = Role::kWeight;
  int target = -1;
};

inline std::vector<Step> VllmLike(int layers = 32, uint64_t kv_bytes = 256 * kMiB) {
  std::vector<Step> s;
  auto alloc = [&](uint64_t bytes, Role role) {
    s.push_back({false, bytes, role, -1});
    return static_cast<int>(s.size() - 1);
  };
  alloc(2 * kMiB, Role::kWeight);    // small segment: first norms, biases
  alloc(1050673152, Role::kWeight);  // embed_tokens 128256 x 4096 bf16
  alloc(32 * kMiB, Role::kWeight);   // rotary cos/sin cache
  for (int l = 0; l < layers; ++l) {
    alloc(48 * kMiB, Role::kWeight);                 // qkv_proj
    alloc(32 * kMiB, Role::kWeight);                 // o_proj
    alloc(224 * kMiB, Role::kWeight);                // gate_up_proj
    alloc(112 * kMiB, Role::kWeight);                // down_proj
    if (l % 8 == 7) alloc(2 * kMiB, Role::kWeight);  // another small segment of norms
  }
  alloc(1050673152, Role::kWeight);  // lm_head
  // The memory profile: a forward pass over 8192 tokens, then empty_cache.
  std::vector<int> profile;
  profile.push_back(alloc(64 * kMiB, Role::kActivation));   // hidden states
  profile.push_back(alloc(64 * kMiB, Role::kActivation));   // residual
  profile.push_back(alloc(20 * kMiB, Role::kActivation));   // a 20 MiB segment (rms stats)
  profile.push_back(alloc(96 * kMiB, Role::kActivation));   // qkv output
  profile.push_back(alloc(32 * kMiB, Role::kActivation));   // cuBLAS workspace
  profile.push_back(alloc(448 * kMiB, Role::kActivation));  // gate_up output
  profile.push_back(alloc(224 * kMiB, Role::kActivation));  // activation output
  profile.push_back(alloc(126 * kMiB, Role::kActivation));  // sampler logits
  for (int a : profile) s.push_back({true, 0, Role::kActivation, a});
  for (int l = 0; l < layers; ++l) alloc(kv_bytes, Role::kKv);
  return s;
}

// With a small model (weights under 64 MiB), the KV buffer is the first large
// allocation and the compute buffer the second: LlamaCppLike(256M, 40M, 300M).
inline std::vector<Step> LlamaCppLike(uint64_t kv_bytes = 1024 * kMiB,
                                      uint64_t weight_bytes = 4403 * kMiB,
                                      uint64_t compute_bytes = 560 * kMiB) {
  std::vector<Step> s;
  auto alloc = [&](uint64_t bytes, Role role) { s.push_back({false, bytes, role, -1}); };
  alloc(weight_bytes, Role::kWeight);                    // CUDA0 model buffer
  alloc(kv_bytes, Role::kKv);                            // CUDA0 KV buffer (all layers, K and V)
  alloc(compute_bytes, Role::kCompute);                  // CUDA0 compute buffer
  for (uint64_t mib : {112, 28, 112, 56, 224, 28, 112})  // pool: dequantised tiles
    alloc(mib * kMiB, Role::kScratch);
  return s;
}

}  // namespace kvtier::replay
