// TickSchedule: when the policy ticks, decided once for the runtime's policy
// thread (on the monotonic clock) and kvtier-bench's VirtualTicker (on its
// virtual clock). It reads no clock: its caller says what time it is.
//  - Periodic ticks, one a period; a late one starts at once and the next
//    comes a period after it (no burst to catch up).
//  - Early ticks, asked for when the engine waits on a page from the host
//    or disk, the device had to evict a page itself, or a WILL_NEED hint
//    came: at once, but not within a fifth of a period (at least 1 ms) of
//    the last tick's start, since faults and evictions come in bursts. An
//    early tick is an extra one: the periodic ones keep their times.
// VirtualTicker skips idle periods (it ticks on period boundaries only
// while there is work, see virtual_ticker.h), so it takes the early rule
// alone (EarlyAt).
// Thread-safety: none; its one caller serialises it.
#pragma once

#include <algorithm>
#include <cstdint>

namespace kvtier {

class TickSchedule {
 public:
  static constexpr uint64_t kMinGapNs = 1'000'000;

  // The first periodic tick is a period after `start_ns`.
  TickSchedule(uint64_t period_ns, uint64_t start_ns)
      : period_(std::max<uint64_t>(period_ns, 1)),
        min_gap_(std::max<uint64_t>(period_ / 5, kMinGapNs)),
        last_start_(start_ns),
        next_(start_ns + period_) {}

  uint64_t period_ns() const { return period_; }
  uint64_t min_gap_ns() const { return min_gap_; }

  // Asks for an early tick (kept until a tick starts).
  void AskEarly() { early_ = true; }
  bool early_asked() const { return early_; }
  // The earliest an early tick asked for at `now_ns` may start.
  uint64_t EarlyAt(uint64_t now_ns) const { return std::max(now_ns, last_start_ + min_gap_); }
  // When the next tick is due: the periodic one, or an early one asked for
  // if that is sooner.
  uint64_t DueAt() const { return early_ ? std::min(next_, last_start_ + min_gap_) : next_; }

  // A tick starts at `now_ns`; true when it is an early one.
  bool Start(uint64_t now_ns) {
    const bool early = now_ns < next_;
    early_ = false;
    last_start_ = now_ns;
    if (!early) next_ = std::max(next_ + period_, now_ns);
    return early;
  }

 private:
  const uint64_t period_;
  const uint64_t min_gap_;
  uint64_t last_start_;
  uint64_t next_;
  bool early_ = false;
};

}  // namespace kvtier
