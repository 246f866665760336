// Deterministic KV block contents, so every read can be verified.
//
// A block's bytes are a function of (session, block index, layer, write
// generation): 64-bit words derived from a splitmix64 hash of the key, one
// multiply and xor per word (vectorises; several GB/s per core). A block left
// over from another session, an older write or another layer never verifies.
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>

namespace chat {

inline uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

inline uint64_t BlockKey(uint32_t session, uint32_t index, uint32_t layer, uint64_t generation) {
  return Mix64(Mix64(Mix64(uint64_t{session} << 32 | index) ^ layer) ^ generation);
}

constexpr uint64_t kWordStep = 0x9e3779b97f4a7c15ull;

inline uint64_t PatternWord(uint64_t key, size_t i) { return key ^ (uint64_t{i} * kWordStep); }

inline void FillPattern(uint64_t* words, size_t count, uint64_t key) {
  for (size_t i = 0; i < count; ++i) words[i] = PatternWord(key, i);
}

// Index of the first word that differs, or `count` when all match.
inline size_t FirstMismatch(const uint64_t* words, size_t count, uint64_t key) {
  for (size_t i = 0; i < count; ++i) {
    if (words[i] != PatternWord(key, i)) return i;
  }
  return count;
}

}  // namespace chat
