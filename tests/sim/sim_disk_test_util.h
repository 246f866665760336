// Helpers for the simulated GPU's disk-tier tests: a fixture with a scratch
// spill directory, a fault-injecting Env and a store that shares the
// device's counters, and a way to see how much of a region's memfd holds
// bytes (a spilled page must not).
// Thread-safety: test-thread use, except the store and env (thread-safe).
#pragma once

#include <sys/stat.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "runtime/storage/fault_env.h"
#include "runtime/storage/spill_store.h"
#include "tests/sim/sim_test_util.h"
#include "tests/storage/storage_test_util.h"

namespace kvtier::testing {

class SimDiskTest : public SimDeviceTest {
 public:
  static constexpr size_t kPage = 256 * kKiB;
  // The pattern seed of `page` at its `version`-th write.
  static uint64_t Seed(uint32_t page, uint32_t version) { return uint64_t{version} << 32 | page; }

 protected:
  void SetUp() override {
    SimDeviceTest::SetUp();
    if (IsSkipped()) return;
    ASSERT_TRUE(dir_.ok());
  }

  // A store of `slots` pages in the scratch directory, over env_, counting
  // into the device's counters. Backoff is short; tests that need to pass
  // it use env_'s manual clock.
  SpillStore* MakeStore(uint32_t slots, size_t page = kPage, bool encrypt = true) {
    SpillStoreConfig config = storage_test::SmallConfig(dir_.path(), slots, page);
    config.encrypt = encrypt;
    config.backoff_min_ns = 1'000'000;
    config.backoff_max_ns = 8'000'000;
    Result<std::unique_ptr<SpillStore>> store = SpillStore::Create(config, &env_, &counters_);
    if (!store.ok()) {
      ADD_FAILURE() << store.status().message();
      return nullptr;
    }
    store_ = std::move(store).value();
    return store_.get();
  }

  // Bytes of the region's memfd that hold data (punched pages hold none).
  static uint64_t MemfdBytes(const Region& r) {
    struct stat st {};
    const auto* sim = static_cast<const MemfdRegion*>(r.backend);
    if (sim == nullptr || fstat(sim->views.memfd, &st) != 0) return ~uint64_t{0};
    return static_cast<uint64_t>(st.st_blocks) * 512;
  }

  // Polls for a page flag set by another thread (the tests' only polling:
  // the flag lives in the page record, which has no condition to wait on).
  static bool WaitForFlag(const Region& r, uint32_t page, uint8_t flag) {
    const auto deadline = std::chrono::steady_clock::now() + kEventDeadline;
    while (!(r.pages[page].flags.load() & flag)) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::yield();
    }
    return true;
  }

  // Polls for a gauge another thread brings down (the staging's drain
  // writes pages with no event a test could wait on).
  static bool WaitForCounterAtMost(const std::atomic<uint64_t>& c, uint64_t most) {
    const auto deadline = std::chrono::steady_clock::now() + kEventDeadline;
    while (c.load() > most) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::yield();
    }
    return true;
  }

  // Creates a region of `pages` pages, writes each with its version-1
  // pattern, and demotes them all to the host tier.
  static RegionPtr HostRegion(MemfdDevice& dev, RegionId id, uint32_t pages, size_t page = kPage) {
    Result<RegionPtr> made = dev.CreateRegion(id, pages * page, page, "kv-" + std::to_string(id));
    if (!made.ok()) {
      ADD_FAILURE() << made.status().message();
      return nullptr;
    }
    Region& r = *made.value();
    for (uint32_t p = 0; p < pages; ++p) WritePattern(PageBase(r, p), page, Seed(p, 1));
    for (uint32_t p = 0; p < pages; ++p) {
      Status s = dev.Demote(r, p);
      if (!s.ok()) ADD_FAILURE() << s.message();
    }
    return made.value();
  }

  // Polls for a page's tier set by another thread (the pipeline brings
  // pages back with no event a test could wait on for that page alone).
  static bool WaitForTier(const Region& r, uint32_t page, Tier tier) {
    const auto deadline = std::chrono::steady_clock::now() + kEventDeadline;
    while (r.pages[page].tier.load() != tier) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::yield();
    }
    return true;
  }

  storage_test::TempDir dir_;
  FaultEnv env_{Env::Default(), 7};
  std::unique_ptr<SpillStore> store_;  // after env_: destroyed before it
};

}  // namespace kvtier::testing
