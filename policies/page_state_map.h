// PageStateMap: a policy's own per-page state, dense per region.
//
// Policies keep small per-page records (queue membership, priorities) beside
// the runtime's PageRecords without per-page heap objects: one vector per
// region, created on first use and sized to the region.
// Thread-safety: none; a policy is used by the policy thread only.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "runtime/page_table.h"

namespace kvtier {

template <typename T>
class PageStateMap {
 public:
  T& At(const Region& region, uint32_t page) {
    std::vector<T>& v = by_region_[region.id];
    if (v.size() < region.pages.size()) v.resize(region.pages.size());
    return v[page];
  }
  // Null when the policy never stored anything for the page.
  T* Find(RegionId region, uint32_t page) {
    auto it = by_region_.find(region);
    if (it == by_region_.end() || page >= it->second.size()) return nullptr;
    return &it->second[page];
  }
  const T* Find(RegionId region, uint32_t page) const {
    auto it = by_region_.find(region);
    if (it == by_region_.end() || page >= it->second.size()) return nullptr;
    return &it->second[page];
  }

 private:
  std::unordered_map<RegionId, std::vector<T>> by_region_;
};

// A page named by region id and index, packed for hashing and queues.
inline uint64_t PageKey(RegionId region, uint32_t page) { return (uint64_t{region} << 32) | page; }
inline RegionId KeyRegion(uint64_t key) { return static_cast<RegionId>(key >> 32); }
inline uint32_t KeyPage(uint64_t key) { return static_cast<uint32_t>(key); }

}  // namespace kvtier
