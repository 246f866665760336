// RegionTable: address -> region lookup for hooks, fault handlers and tools.
//
// Regions are keyed by base address in an ordered map behind a shared mutex:
// lookups (every cudaFree, every fault) take it shared; create and destroy
// take it exclusive. Regions are shared_ptr so the policy thread can hold a
// snapshot while a region is freed. Thread-safety: all methods are safe.
#pragma once

#include <map>
#include <vector>

#include "runtime/mutex.h"
#include "runtime/page_table.h"

namespace kvtier {

class RegionTable {
 public:
  void Insert(RegionPtr region);
  // Removes and returns the region whose base is exactly `base`.
  RegionPtr Remove(uintptr_t base);
  // The region containing `addr`, or null.
  RegionPtr Find(uintptr_t addr) const;
  RegionPtr FindById(RegionId id) const;
  std::vector<RegionPtr> Snapshot() const;
  size_t size() const;

 private:
  mutable SharedMutex mu_;
  std::map<uintptr_t, RegionPtr> by_base_ GUARDED_BY(mu_);
};

}  // namespace kvtier
