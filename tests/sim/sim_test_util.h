// Helpers for the simulated-GPU tests: a DeviceEvents fake that records every
// call, a fixture that builds a MemfdDevice around it, and byte patterns.
// Thread-safety: RecordingEvents is safe from any thread (the fault threads
// call it); the rest is used from the test thread.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/counters.h"
#include "runtime/device/device.h"
#include "runtime/device/memfd/memfd_device.h"
#include "tests/testing/skip_without.h"

namespace kvtier::testing {

inline constexpr size_t kKiB = 1024;
inline constexpr size_t kMiB = 1024 * kKiB;
// Generous: only reached when a fault was lost, which is the bug under test.
inline constexpr std::chrono::seconds kEventDeadline{20};

class RecordingEvents : public DeviceEvents {
 public:
  struct Fault {
    RegionId region;
    uint32_t page;
    Tier from;
    uint64_t wait_ns;
  };
  struct Eviction {
    RegionId region;
    uint32_t page;
  };

  void OnFault(Region& region, uint32_t page, Tier from, uint64_t wait_ns) override {
    std::lock_guard<std::mutex> lock(mu_);
    faults_.push_back({region.id, page, from, wait_ns});
    cv_.notify_all();
  }
  void OnDriverEviction(Region& region, uint32_t page) override {
    std::lock_guard<std::mutex> lock(mu_);
    evictions_.push_back({region.id, page});
    cv_.notify_all();
  }
  void OnArrivedAhead(Region& region, uint32_t first, uint32_t count, Tier) override {
    std::lock_guard<std::mutex> lock(mu_);
    for (uint32_t p = first; p < first + count; ++p) ahead_.push_back({region.id, p});
    cv_.notify_all();
  }

  // Faults are reported after the toucher is woken, so a test that has just
  // touched a page waits for the report.
  bool WaitForFaults(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, kEventDeadline, [&] { return faults_.size() >= n; });
  }
  // Faults and pages brought back ahead of a touch, together: a spilled
  // page a test touches may come back either way (the restore pipeline
  // reads its neighbours with it).
  bool WaitForArrivals(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, kEventDeadline, [&] { return faults_.size() + ahead_.size() >= n; });
  }
  // How many faults and pages brought back ahead have been reported so far.
  struct Mark {
    size_t faults = 0;
    size_t ahead = 0;
  };
  Mark MarkNow() const {
    std::lock_guard<std::mutex> lock(mu_);
    return {faults_.size(), ahead_.size()};
  }
  // Each of pages [first, first+count) of a region reported back from disk
  // after `since`, by a fault or ahead of one: its counters are settled then
  // (a toucher woken by an install may run before they are).
  bool WaitForPagesBackFromDisk(Mark since, RegionId region, uint32_t first, uint32_t count) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, kEventDeadline, [&] {
      for (uint32_t p = first; p < first + count; ++p) {
        auto faulted = [&](const Fault& e) {
          return e.region == region && e.page == p && e.from == Tier::kDisk;
        };
        auto ahead = [&](const Eviction& e) { return e.region == region && e.page == p; };
        if (std::none_of(faults_.begin() + since.faults, faults_.end(), faulted) &&
            std::none_of(ahead_.begin() + since.ahead, ahead_.end(), ahead)) {
          return false;
        }
      }
      return true;
    });
  }
  bool WaitForEvictions(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, kEventDeadline, [&] { return evictions_.size() >= n; });
  }
  std::vector<Fault> faults() const {
    std::lock_guard<std::mutex> lock(mu_);
    return faults_;
  }
  std::vector<Eviction> evictions() const {
    std::lock_guard<std::mutex> lock(mu_);
    return evictions_;
  }
  // Pages reported back ahead of a touch (OnArrivedAhead), one each.
  std::vector<Eviction> ahead() const {
    std::lock_guard<std::mutex> lock(mu_);
    return ahead_;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Fault> faults_;
  std::vector<Eviction> evictions_;
  std::vector<Eviction> ahead_;
};

// Builds devices whose events and counters the test can inspect. Skips the
// test where userfaultfd is unavailable (e.g. a container's seccomp filter).
class SimDeviceTest : public ::testing::Test {
 protected:
  std::unique_ptr<MemfdDevice> MakeDevice(uint64_t capacity, int fault_threads = 1,
                                          bool copy_fill = false, SpillStore* store = nullptr) {
    MemfdDeviceConfig config;
    return MakeDevice(capacity, fault_threads, copy_fill, store, config);
  }
  // The same from a config with other fields set (fill_ahead_pages,
  // copy_ahead).
  std::unique_ptr<MemfdDevice> MakeDevice(uint64_t capacity, int fault_threads, bool copy_fill,
                                          SpillStore* store, MemfdDeviceConfig config) {
    config.capacity_bytes = capacity;
    config.fault_threads = fault_threads;
    config.copy_fill = copy_fill;
    config.store = store;
    config.events = &events_;
    config.counters = &counters_;
    Result<std::unique_ptr<MemfdDevice>> device = MemfdDevice::Create(config);
    if (!device.ok()) {
      ADD_FAILURE() << device.status().message();
      return nullptr;
    }
    return std::move(device).value();
  }
  void SetUp() override {
    MemfdDeviceConfig probe;
    probe.capacity_bytes = 2 * kMiB;
    Result<std::unique_ptr<MemfdDevice>> device = MemfdDevice::Create(probe);
    if (!device.ok() && device.status().message().find("userfaultfd") != std::string::npos) {
      KVTIER_SKIP_WITHOUT(device.status().message());
    }
  }
  uint64_t Get(const std::atomic<uint64_t>& c) const { return Counters::Get(c); }

  RecordingEvents events_;
  Counters counters_;
};

inline Tier TierOf(const Region& r, uint32_t page) { return r.pages[page].tier.load(); }

// A word no other (region, page, offset, version) produces by accident.
inline uint64_t PatternWord(uint64_t seed, uint64_t word_index) {
  uint64_t x = (seed + 1) * 0x9E3779B97F4A7C15ull ^ (word_index + 1) * 0xBF58476D1CE4E5B9ull;
  return x ^ (x >> 31);
}

// Writes/checks the pattern of `seed` over [p, p + bytes) with plain word
// stores and loads, as an engine kernel would.
inline void WritePattern(uint8_t* p, size_t bytes, uint64_t seed) {
  auto* w = reinterpret_cast<volatile uint64_t*>(p);
  for (size_t i = 0; i < bytes / 8; ++i) w[i] = PatternWord(seed, i);
}
// Returns the index of the first wrong word, or -1.
inline int64_t CheckPattern(const uint8_t* p, size_t bytes, uint64_t seed) {
  auto* w = reinterpret_cast<const volatile uint64_t*>(p);
  for (size_t i = 0; i < bytes / 8; ++i) {
    if (w[i] != PatternWord(seed, i)) return static_cast<int64_t>(i);
  }
  return -1;
}

inline uint8_t* PageBase(const Region& r, uint32_t page) {
  return reinterpret_cast<uint8_t*>(r.PageAddr(page));
}

}  // namespace kvtier::testing
