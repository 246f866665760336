// Integrity stress of the three tiers: engine threads read and write random
// pages of a region much larger than device + host budgets (each write
// stamps the page with a new version and a pattern derived from it; each
// read checks the page holds exactly the last version written) while pages
// are demoted, spilled, restored and promoted underneath them:
//   - through a real Runtime (its policy thread spills past the host
//     watermark) plus a thread of random moves and WILL_NEED hints;
//   - through a device over a store that injects write errors, read errors,
//     bit flips in transit and a slow device, with random moves only.
// KVTIER_STRESS_SECONDS (default 6) sets the Runtime run's length (the fault
// run takes half); KVTIER_STRESS_REGION the region size (default 64M); any
// KVTIER_* option set in the environment overrides the small budgets below,
// so a long multi-GiB run is one command, e.g.
//   KVTIER_STRESS_SECONDS=60 KVTIER_STRESS_REGION=2G KVTIER_PAGE_SIZE=2M
//   KVTIER_DISK_BUDGET=4G sim_disk_stress_test
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "runtime/device/memfd/memfd_device.h"
#include "runtime/options.h"
#include "runtime/runtime.h"
#include "runtime/units.h"
#include "start/bootstrap.h"
#include "tests/sim/sim_disk_test_util.h"

namespace kvtier::testing {
namespace {

using Clock = std::chrono::steady_clock;

double StressSeconds() {
  const char* v = ProcessEnv()("KVTIER_STRESS_SECONDS");
  const double s = v ? atof(v) : 0;
  return s > 0 ? s : 6;
}

uint64_t StressRegionBytes() {
  const char* v = ProcessEnv()("KVTIER_STRESS_REGION");
  Result<uint64_t> bytes = ParseSize(v ? v : "64M");
  return bytes.ok() && bytes.value() > 0 ? bytes.value() : uint64_t{64} << 20;
}

// The engine side: per-page locks (so a reader and a writer of one page do
// not race in the test itself) and the last version written to each page.
class StampedPages {
 public:
  StampedPages(uint8_t* base, size_t page, uint32_t pages)
      : base_(base), page_(page), locks_(pages), versions_(pages, 0) {}
  uint32_t pages() const { return static_cast<uint32_t>(versions_.size()); }

  // One engine operation on page p: write a new version, or check it.
  void Step(uint32_t p, bool write) {
    std::lock_guard<std::mutex> lock(locks_[p]);
    auto* w = reinterpret_cast<volatile uint64_t*>(base_ + uint64_t{p} * page_);
    const size_t words = page_ / 8;
    uint32_t v = versions_[p];
    if (write) {
      ++v;
      for (size_t i = 1; i < words; ++i) w[i] = PatternWord(Seed(p, v), i);
      w[0] = Seed(p, v);  // the stamp
      versions_[p] = v;
      writes_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    reads_.fetch_add(1, std::memory_order_relaxed);
    for (size_t i = 0; i < words; ++i) {
      const uint64_t want = v == 0 ? 0 : i == 0 ? Seed(p, v) : PatternWord(Seed(p, v), i);
      if (w[i] == want) continue;
      Mismatch(p, v, w[0], i);
      return;
    }
  }
  void CheckAll() {
    for (uint32_t p = 0; p < pages(); ++p) Step(p, false);
  }
  uint64_t writes() const { return writes_.load(); }
  uint64_t reads() const { return reads_.load(); }
  uint64_t mismatches() const { return mismatches_.load(); }

 private:
  static uint64_t Seed(uint32_t p, uint32_t v) { return uint64_t{v} << 32 | p; }
  void Mismatch(uint32_t p, uint32_t v, uint64_t stamp, size_t word) {
    if (mismatches_.fetch_add(1) < 5) {
      ADD_FAILURE() << "page " << p << ": expected version " << v << ", found stamp version "
                    << (stamp >> 32) << " of page " << (stamp & 0xffffffff) << ", first wrong word "
                    << word;
    }
  }

  uint8_t* const base_;
  const size_t page_;
  std::vector<std::mutex> locks_;
  std::vector<uint32_t> versions_;  // guarded by locks_[page]
  std::atomic<uint64_t> writes_{0}, reads_{0}, mismatches_{0};
};

struct MoveCounts {
  std::atomic<uint64_t> ok{0}, failed{0};
};

// Runs `engines` engine threads and one mover thread for `seconds`. The
// mover picks a random page and demotes, spills or promotes it (and, given
// a runtime, sometimes hints a range WILL_NEED instead); it calls `each_move`
// (if set) before every move.
void RunStress(StampedPages& pages, Device& dev, Region& region, Runtime* rt, double seconds,
               int engines, MoveCounts* moves, const std::function<void()>& each_move = nullptr) {
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(seconds));
  std::vector<std::thread> threads;
  for (int t = 0; t < engines; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(100 + t);
      while (Clock::now() < deadline) {
        for (int i = 0; i < 16; ++i) pages.Step(rng() % pages.pages(), rng() % 2 == 0);
      }
    });
  }
  threads.emplace_back([&] {
    std::mt19937_64 rng(7);
    while (Clock::now() < deadline) {
      if (each_move) each_move();
      const uint32_t p = rng() % pages.pages();
      Status s;
      switch (rng() % 8) {
        case 0:
        case 1:
          s = dev.Demote(region, p);
          break;
        case 2:
        case 3:
        case 4:
          s = dev.Spill(region, p);
          break;
        case 5:
        case 6:
          s = dev.Promote(region, p);
          break;
        default:
          if (rt) {
            s = rt->Hint(reinterpret_cast<void*>(region.PageAddr(p)), 4 * region.page_size,
                         SignalKind::kWillNeed);
          }
      }
      (s.ok() ? moves->ok : moves->failed).fetch_add(1, std::memory_order_relaxed);
    }
  });
  for (auto& t : threads) t.join();
}

void Print(const char* name, const StampedPages& pages, const Counters& c, double seconds,
           const MoveCounts& moves) {
  auto g = [](const std::atomic<uint64_t>& v) {
    return static_cast<unsigned long long>(Counters::Get(v));
  };
  printf(
      "[%s] %.0f s, %u pages: engine writes %llu, reads %llu, mismatches %llu; spilled %llu, "
      "restored %llu, faults %llu, promoted %llu, demoted %llu, driver evictions %llu; "
      "spill errors %llu, restore errors %llu, checksum mismatches %llu; mover ok %llu, "
      "refused %llu\n",
      name, seconds, pages.pages(), static_cast<unsigned long long>(pages.writes()),
      static_cast<unsigned long long>(pages.reads()),
      static_cast<unsigned long long>(pages.mismatches()), g(c.spilled_pages), g(c.restored_pages),
      g(c.faults), g(c.promoted_pages), g(c.demoted_pages), g(c.driver_evictions),
      g(c.spill_errors), g(c.restore_errors), g(c.checksum_mismatches),
      static_cast<unsigned long long>(moves.ok.load()),
      static_cast<unsigned long long>(moves.failed.load()));
}

// The Runtime run, over the options in `values` (the process environment
// overrides them).
void StressThroughTheRuntime(const char* name, std::map<std::string, std::string> values,
                             bool host_backend = false) {
  const double seconds = StressSeconds();
  const EnvLookup process = ProcessEnv();
  Result<Options> options = ParseOptions([&](const char* name) -> const char* {
    if (const char* set = process(name)) return set;
    auto it = values.find(name);
    return it == values.end() ? nullptr : it->second.c_str();
  });
  ASSERT_TRUE(options.ok()) << options.status().message();
  Options effective = options.value();
  Runtime::Parts parts = SimParts();
  if (host_backend) {
    Status s = HostBackendParts(options.value(), nullptr, &effective, &parts);
    ASSERT_TRUE(s.ok()) << s.message();
  }
  Result<std::unique_ptr<Runtime>> made = Runtime::Create(effective, std::move(parts));
  ASSERT_TRUE(made.ok()) << made.status().message();
  Runtime& rt = *made.value();
  const uint64_t bytes = StressRegionBytes();
  Result<void*> base = rt.CreateRegion(bytes, nullptr);
  ASSERT_TRUE(base.ok()) << base.status().message();
  RegionPtr region = rt.regions().Find(reinterpret_cast<uintptr_t>(base.value()));
  ASSERT_TRUE(region);
  const Counters& c = rt.counters();
  ASSERT_GT(region->pages.size() * region->page_size,
            Counters::Get(c.device_budget_bytes) + Counters::Get(c.host_budget_bytes))
      << "the region must not fit in device + host memory";

  StampedPages pages(static_cast<uint8_t*>(base.value()), region->page_size,
                     static_cast<uint32_t>(region->pages.size()));
  MoveCounts moves;
  RunStress(pages, rt.device(), *region, &rt, seconds, 3, &moves);
  pages.CheckAll();
  Print(name, pages, c, seconds, moves);
  EXPECT_EQ(pages.mismatches(), 0u);
  EXPECT_GT(Counters::Get(c.spilled_pages), 0u);
  EXPECT_GT(Counters::Get(c.restored_pages), 0u);
  EXPECT_EQ(Counters::Get(c.checksum_mismatches), 0u);
  EXPECT_LE(Counters::Get(c.device_peak_bytes), Counters::Get(c.device_budget_bytes));
  if (host_backend) {
    printf("[%s] pages that left memory unwritten: %llu for their copy, %llu of zeros\n", name,
           static_cast<unsigned long long>(Counters::Get(c.spill_clean_pages)),
           static_cast<unsigned long long>(Counters::Get(c.zero_pages_dropped)));
    EXPECT_GT(Counters::Get(c.spill_clean_pages), 0u);
    EXPECT_GT(Counters::Get(c.zero_pages_dropped), 0u);
  }
  ASSERT_TRUE(rt.FreeRegion(base.value()));
  EXPECT_EQ(Counters::Get(c.disk_used_bytes), 0u) << "freeing the region returns its slots";
}

TEST_F(SimDiskTest, StressThroughTheRuntimeLosesNothing) {
  StressThroughTheRuntime("runtime", {{"KVTIER_DEVICE_BUDGET", "8M"},
                                      {"KVTIER_HOST_BUDGET", "16M"},
                                      {"KVTIER_DISK_BUDGET", "256M"},
                                      {"KVTIER_DISK_DIR", dir_.path()},
                                      {"KVTIER_PAGE_SIZE", "256K"},
                                      {"KVTIER_TICK_MS", "2"},
                                      {"KVTIER_STATS", "0"},
                                      {"KVTIER_SIM_FAULT_THREADS", "2"},
                                      {"KVTIER_MOVE_BYTES_PER_TICK", "8M"}});
}

// The host backend: pages leave memory for SSD in groups (zeros dropped and
// clean copies reused, punched out with the device lock released), come
// back through the restore pipeline, and are copied ahead, all while the
// engine threads touch them.
// It found a written page read back as zeros (a copy ahead's snapshot read
// a page through the alias after it left memory, which filled its hole with
// zeros that the page's restore then mapped).
TEST_F(SimDiskTest, StressThroughTheHostBackendLosesNothing) {
  StressThroughTheRuntime("host backend",
                          {{"KVTIER_HOST_BUDGET", "8M"},
                           {"KVTIER_DISK_BUDGET", "256M"},
                           {"KVTIER_DISK_DIR", dir_.path()},
                           {"KVTIER_PAGE_SIZE", "64K"},
                           {"KVTIER_TICK_MS", "2"},
                           {"KVTIER_STATS", "0"},
                           {"KVTIER_MOVE_BYTES_PER_TICK", "8M"}},
                          /*host_backend=*/true);
}

TEST_F(SimDiskTest, StressThroughInjectedStorageFaultsLosesNothing) {
  const double seconds = StressSeconds() / 2;
  SpillStore* store = MakeStore(256);
  ASSERT_TRUE(store);
  auto dev = MakeDevice(16 * kPage, /*fault_threads=*/2, false, store);
  ASSERT_TRUE(dev);
  constexpr uint32_t kPages = 96;
  Result<RegionPtr> made = dev->CreateRegion(20, kPages * kPage, kPage, "stress-faults");
  ASSERT_TRUE(made.ok()) << made.status().message();
  Region& r = *made.value();
  // Every kind that must not stop the engine (a bit flipped on disk must:
  // see the corruption test), armed after the store's open probe. Write
  // faults come at random: each leaves its page on the host.
  for (Fault f : {Fault::kWriteNoSpace, Fault::kWriteIoError, Fault::kShortWrite}) {
    env_.SetRate(f, 0.03);
  }
  env_.SetRate(Fault::kSlow, 0.05);
  env_.SetSlowDelay(1'000'000);
  // A read fault is retried once, and a second one on the retry stops the
  // process by design; so read faults are armed one at a time, the next
  // only well after the last one fired (its retry long done).
  Fault next_read = Fault::kReadIoError;
  uint64_t armed = 0, seen = 0;
  Clock::time_point fired_at{};
  auto each_move = [&] {
    const uint64_t fired = env_.injected(Fault::kReadIoError) + env_.injected(Fault::kReadBitFlip);
    if (fired < armed) return;  // the armed one has not fired yet
    if (fired != seen) {
      seen = fired;
      fired_at = Clock::now();
      return;
    }
    if (armed > 0 && Clock::now() - fired_at < std::chrono::milliseconds(100)) return;
    env_.Arm(next_read, 1);
    next_read = next_read == Fault::kReadIoError ? Fault::kReadBitFlip : Fault::kReadIoError;
    ++armed;
  };

  StampedPages pages(reinterpret_cast<uint8_t*>(r.base), kPage, kPages);
  MoveCounts moves;
  RunStress(pages, *dev, r, nullptr, seconds, 3, &moves, each_move);
  env_.Clear();
  pages.CheckAll();
  Print("faults", pages, counters_, seconds, moves);
  EXPECT_EQ(pages.mismatches(), 0u);
  EXPECT_GT(Get(counters_.spilled_pages), 0u);
  EXPECT_GT(Get(counters_.restored_pages), 0u);
  // The injected errors happened and show in the stats.
  EXPECT_GT(Get(counters_.spill_errors), 0u);
  EXPECT_GT(Get(counters_.restore_errors), 0u);
  EXPECT_GT(Get(counters_.checksum_mismatches), 0u);
  EXPECT_EQ(Get(counters_.spill_errors), env_.injected(Fault::kWriteNoSpace) +
                                             env_.injected(Fault::kWriteIoError) +
                                             env_.injected(Fault::kShortWrite));
  dev->DestroyRegion(r);
  EXPECT_EQ(store->used_slots(), 0u);
}

}  // namespace
}  // namespace kvtier::testing
