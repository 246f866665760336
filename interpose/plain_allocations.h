// PlainAllocations: device allocations that are not tiered regions, by base
// address.
//
// The hooks keep one table per process: on the simulated GPU it is the
// simulated device memory itself (what cudaFree may free, what cudaMemcpy may
// copy into, what cudaMemGetInfo counts); on a real GPU it counts the bytes
// kvtier leaves untouched. Thread-safety: every method is safe from any
// thread; one mutex guards the map (lookups are short and never held across a
// copy).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>

#include "runtime/mutex.h"

namespace kvtier::interpose {

class PlainAllocations {
 public:
  // Reserves `bytes` against `limit` (bytes()+bytes must not exceed it);
  // false, and nothing reserved, when it would. Pair with Insert or Unreserve.
  bool Reserve(uint64_t bytes, uint64_t limit);
  void Unreserve(uint64_t bytes);
  // Records a reserved allocation at `base`.
  void Insert(const void* base, size_t bytes);
  // Removes the allocation that starts at `base` and returns its size; 0 when
  // there is none (unknown pointer, interior pointer, or already freed).
  size_t Remove(const void* base);
  // True when [p, p+n) lies inside one allocation (n may be 0).
  bool Contains(const void* p, size_t n) const;

  uint64_t bytes() const { return bytes_.load(std::memory_order_relaxed); }
  size_t count() const;

  // fork: the prepare handler locks, the parent and child handlers unlock, so
  // a child never inherits the mutex held by a thread that does not exist.
  void LockForFork() ACQUIRE(mu_) { mu_.Lock(); }
  void UnlockAfterFork() RELEASE(mu_) { mu_.Unlock(); }

 private:
  mutable Mutex mu_;
  std::map<uintptr_t, size_t> by_base_ GUARDED_BY(mu_);
  std::atomic<uint64_t> bytes_{0};  // reserved or inserted
};

}  // namespace kvtier::interpose
