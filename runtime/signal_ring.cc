// SignalRing: bounded MPMC queue with per-slot sequence numbers.
//
// Slot i is free for the push with ticket t when seq == t, and holds a signal
// for the pop with ticket t when seq == t + 1; a pop releases it for the push
// one lap later by storing t + capacity. Tickets are claimed with a CAS, so a
// full or empty ring is detected without blocking.
#include "runtime/signal_ring.h"

namespace kvtier {

SignalRing::SignalRing(size_t capacity) {
  size_t cap = 2;
  while (cap < capacity) cap <<= 1;
  slots_.reset(new Slot[cap]);
  for (size_t i = 0; i < cap; ++i) slots_[i].seq.store(i, std::memory_order_relaxed);
  mask_ = cap - 1;
}

bool SignalRing::TryPush(const Signal& s) {
  uint64_t pos = tail_.load(std::memory_order_relaxed);
  for (;;) {
    Slot& slot = slots_[pos & mask_];
    uint64_t seq = slot.seq.load(std::memory_order_acquire);
    int64_t diff = static_cast<int64_t>(seq) - static_cast<int64_t>(pos);
    if (diff == 0) {
      if (tail_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
        slot.signal = s;
        slot.seq.store(pos + 1, std::memory_order_release);
        return true;
      }
    } else if (diff < 0) {
      return false;  // full: the slot still holds the signal of the last lap
    } else {
      pos = tail_.load(std::memory_order_relaxed);
    }
  }
}

bool SignalRing::TryPop(Signal* out) {
  uint64_t pos = head_.load(std::memory_order_relaxed);
  for (;;) {
    Slot& slot = slots_[pos & mask_];
    uint64_t seq = slot.seq.load(std::memory_order_acquire);
    int64_t diff = static_cast<int64_t>(seq) - static_cast<int64_t>(pos + 1);
    if (diff == 0) {
      if (head_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
        *out = slot.signal;
        slot.seq.store(pos + mask_ + 1, std::memory_order_release);
        return true;
      }
    } else if (diff < 0) {
      return false;  // empty
    } else {
      pos = head_.load(std::memory_order_relaxed);
    }
  }
}

}  // namespace kvtier
