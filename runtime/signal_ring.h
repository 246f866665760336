// SignalRing: bounded lock-free queue of access signals into the policy.
//
// Producers are fault handlers, launch hooks and the hint API, on any thread;
// the consumer is the policy thread. Built on per-slot sequence numbers
// (Vyukov's bounded MPMC queue): a push or pop is one CAS plus a store, never
// blocks, and a full ring drops the signal and says so (the caller counts
// it). Thread-safety: every method is safe from any thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "runtime/page_table.h"

namespace kvtier {

enum class SignalKind : uint8_t {
  kFault = 0,     // a device page fault brought the page back (evidence of use)
  kLaunch = 1,    // a kernel launch referenced the region (page = all)
  kWillNeed = 2,  // hint: will be used soon (prefetch)
  kCold = 3,      // hint: will not be used for a while
  kPin = 4,       // hint: keep on the device
  kUnpin = 5,     // hint: undo kPin
  kAccess = 6,    // other access evidence (e.g. a copy into the page)
  kEvicted = 7,   // the device evicted the page to the host itself (it was full)
};

struct Signal {
  SignalKind kind = SignalKind::kFault;
  RegionId region = 0;
  uint32_t page = 0;
  uint32_t pages = 1;  // pages covered, from `page` (launches: the whole region)
  uint64_t time_ns = 0;
  // Faults and pages that arrived ahead of a touch (kAccess from the
  // device's OnArrivedAhead): where the page was.
  Tier from = Tier::kUntouched;
};

class SignalRing {
 public:
  // capacity is rounded up to a power of two.
  explicit SignalRing(size_t capacity);
  SignalRing(const SignalRing&) = delete;
  SignalRing& operator=(const SignalRing&) = delete;

  // Returns false (and stores nothing) when the ring is full.
  bool TryPush(const Signal& s);
  // Returns false when the ring is empty.
  bool TryPop(Signal* out);
  size_t capacity() const { return mask_ + 1; }

 private:
  struct alignas(64) Slot {
    std::atomic<uint64_t> seq;
    Signal signal;
  };
  std::unique_ptr<Slot[]> slots_;
  size_t mask_;
  alignas(64) std::atomic<uint64_t> head_{0};  // next pop
  alignas(64) std::atomic<uint64_t> tail_{0};  // next push
};

}  // namespace kvtier
