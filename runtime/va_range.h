// VaRange: one reserved span of address space that the host backend places
// every tiered region in, so that "is this pointer kvtier's?" is a range
// compare.
//
// The free() hook sees every pointer the process frees. Placing the regions'
// engine views inside one PROT_NONE reservation lets it tell a tiered block
// from a foreign one with two loads and a compare: lock-free, allocation-free,
// O(1) (`Contains`). Take() hands out page-aligned spans of the reservation
// (first fit, under a lock: regions are made rarely); Give() maps the span
// back to PROT_NONE and returns it. The reservation is never unmapped, so a
// late free() on any thread still finds the bounds it read valid.
//
// The process has one (Process()), constant-initialised, so the hooks can
// test it before any constructor has run. Thread-safety: any thread;
// Contains never blocks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>

#include "runtime/mutex.h"
#include "runtime/not_sanitized.h"
#include "runtime/status.h"

namespace kvtier {

class VaRange {
 public:
  constexpr VaRange() = default;
  // Unmaps the reservation; the process's range is left as it is.
  ~VaRange();
  VaRange(const VaRange&) = delete;
  VaRange& operator=(const VaRange&) = delete;
  // The process's range; Reserve it before use. Never destroyed, so a free()
  // during exit still reads its bounds.
  [[gnu::always_inline]] static VaRange& Process() { return process_; }

  // Reserves `bytes` of address space (PROT_NONE, MAP_NORESERVE: no memory is
  // committed). Once per range; later calls succeed when a reservation exists.
  Status Reserve(size_t bytes);
  // A span of `bytes` (a multiple of the base page) whose start is a multiple
  // of `align` (a power of two), still PROT_NONE: the caller maps over it
  // with MAP_FIXED. Fails when the reservation has no room.
  Result<uintptr_t> Take(size_t bytes, size_t align);
  // Returns a span from Take: maps it back to PROT_NONE, then frees it.
  void Give(uintptr_t start, size_t bytes);

  // Plain blocks: spans taken from the range that are no tiered region (a
  // fork child's private copies of its parent's blocks, recorded with
  // AdoptPlainForkLocked below). PlainBytes gives its length when `p` starts
  // one (else 0); FreePlain gives it back and forgets it (false when `p`
  // starts none).
  size_t PlainBytes(const void* p) const;
  bool FreePlain(const void* p);

  // Around fork: LockForFork in the parent before it forks (so the child's
  // copy of the span lists is whole), AdoptPlainForkLocked in the child while
  // it holds that lock, UnlockAfterFork in both.
  void LockForFork() ACQUIRE(mu_);
  void AdoptPlainForkLocked(uintptr_t start, size_t bytes) REQUIRES(mu_);
  void UnlockAfterFork() RELEASE(mu_);

  // Whether `p` lies inside the reservation (false before Reserve). Safe
  // before the sanitizer runtimes start (the heap hooks call it then).
  [[gnu::always_inline]] KVTIER_NOT_SANITIZED bool Contains(const void* p) const {
    const uintptr_t lo = __atomic_load_n(&lo_, __ATOMIC_RELAXED);
    return reinterpret_cast<uintptr_t>(p) - lo < __atomic_load_n(&len_, __ATOMIC_RELAXED);
  }
  uintptr_t lo() const { return __atomic_load_n(&lo_, __ATOMIC_RELAXED); }
  size_t size() const { return __atomic_load_n(&len_, __ATOMIC_RELAXED); }
  // Bytes handed out by Take and not yet given back.
  size_t taken_bytes() const;

 private:
  static VaRange process_;

  // Written once, by Reserve, with __atomic builtins (not std::atomic: see
  // runtime/not_sanitized.h); len_ 0 until then, so Contains is false.
  uintptr_t lo_ = 0;
  size_t len_ = 0;
  mutable Mutex mu_;
  // start -> length, coalesced; made by Reserve (a pointer keeps the class
  // constant-initialisable and trivially destructible).
  std::map<uintptr_t, size_t>* free_ GUARDED_BY(mu_) = nullptr;
  size_t taken_ GUARDED_BY(mu_) = 0;
  std::map<uintptr_t, size_t>* plain_ GUARDED_BY(mu_) = nullptr;  // start -> length
};

}  // namespace kvtier
