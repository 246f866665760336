// Clock: where the runtime, the tick engine and the mover read time, and
// MonotonicNs, kvtier's one reading of the monotonic clock (the CUDA backend,
// the launch scan, the simulated CUDA runtime's events and the storage Env
// use it; none keeps a clock of its own).
//
// Production code reads the monotonic clock; tests hand in a ManualClock
// (Runtime::Parts::clock stamps signals and times ticks) and kvtier-bench the
// virtual clock of its model device, so the same runtime, tick and mover code
// runs on wall time, on a test's time and on simulated time. Two readings
// stay on wall time by design: the policy thread's period (a condition
// variable's deadline) and what a tick costs (policy_ns: CPU spent, whatever
// the clock says).
// Thread-safety: NowNs is safe from any thread on every implementation.
#pragma once

#include <time.h>

#include <atomic>
#include <cstdint>

namespace kvtier {

// CLOCK_MONOTONIC in nanoseconds (no allocation, safe in a preload).
inline uint64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

class Clock {
 public:
  virtual ~Clock() = default;
  virtual uint64_t NowNs() const = 0;
};

class MonotonicClock final : public Clock {
 public:
  uint64_t NowNs() const override { return MonotonicNs(); }
  // The process's instance.
  static Clock& Get() {
    static MonotonicClock clock;
    return clock;
  }
};

// Time that moves only when a test says so.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(uint64_t start_ns = 0) : now_(start_ns) {}
  uint64_t NowNs() const override { return now_.load(std::memory_order_relaxed); }
  void Set(uint64_t ns) { now_.store(ns, std::memory_order_relaxed); }
  void Advance(uint64_t ns) { now_.fetch_add(ns, std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> now_;
};

}  // namespace kvtier
