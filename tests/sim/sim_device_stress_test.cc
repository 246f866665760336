// MemfdDevice under concurrency (many faulting threads over a region much
// larger than the device, demotes racing a writer), across fork, without
// privilege, plus a printed (not asserted) measurement of fault costs.
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <latch>
#include <random>
#include <thread>
#include <vector>

#include "runtime/device/memfd/memfd_device.h"
#include "tests/sim/sim_test_util.h"
#include "tests/testing/skip_without.h"

namespace kvtier::testing {
namespace {

using Clock = std::chrono::steady_clock;

double MicrosSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

TEST_F(SimDeviceTest, CapacityHoldsUnderConcurrentFaultsFromManyThreads) {
  constexpr size_t kPage = 64 * kKiB;
  constexpr uint32_t kCapacityPages = 32;
  constexpr uint32_t kPages = 8 * kCapacityPages;  // region = 8x the device
  constexpr int kThreads = 4;
  auto dev = MakeDevice(kCapacityPages * kPage, /*fault_threads=*/2);
  ASSERT_TRUE(dev);
  Result<RegionPtr> made = dev->CreateRegion(11, kPages * kPage, kPage, "crowd");
  ASSERT_TRUE(made.ok()) << made.status().message();
  Region& r = *made.value();

  std::atomic<bool> done{false};
  std::atomic<uint64_t> most_resident{0};
  std::thread watcher([&] {
    while (!done.load()) {
      most_resident.store(std::max(most_resident.load(), dev->resident_bytes()));
      std::this_thread::yield();
    }
  });
  std::atomic<int> bad_pages{0};
  std::latch written(kThreads);
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) {
    workers.emplace_back([&, t] {
      std::mt19937 rng(1234 + t);
      // Phase 1: each thread writes its own pages (no two writers share a
      // page) in a random order, faulting and evicting each other's.
      std::vector<uint32_t> mine;
      for (uint32_t p = t; p < kPages; p += kThreads) mine.push_back(p);
      std::shuffle(mine.begin(), mine.end(), rng);
      for (uint32_t p : mine) WritePattern(PageBase(r, p), kPage, p);
      written.arrive_and_wait();
      // Phase 2: everyone reads random pages of everyone's.
      std::uniform_int_distribution<uint32_t> pick(0, kPages - 1);
      for (int i = 0; i < 400; ++i) {
        const uint32_t p = pick(rng);
        if (CheckPattern(PageBase(r, p), kPage, p) != -1) bad_pages.fetch_add(1);
      }
    });
  }
  for (auto& w : workers) w.join();
  done.store(true);
  watcher.join();

  EXPECT_EQ(bad_pages.load(), 0);
  for (uint32_t p = 0; p < kPages; ++p) {
    ASSERT_EQ(CheckPattern(PageBase(r, p), kPage, p), -1) << "page " << p;
  }
  EXPECT_LE(Get(counters_.device_peak_bytes), dev->capacity_bytes());
  EXPECT_LE(most_resident.load(), dev->capacity_bytes());
  // A handler wakes the toucher before it finishes its books; a Promote
  // takes the transition lock after it, so the books are settled after this.
  ASSERT_TRUE(dev->Promote(r, 0).ok());
  EXPECT_EQ(dev->resident_bytes(), dev->capacity_bytes());
  const uint64_t evictions = Get(counters_.driver_evictions);
  EXPECT_GE(evictions, kPages - kCapacityPages);
  ASSERT_TRUE(events_.WaitForEvictions(evictions));
  EXPECT_EQ(events_.evictions().size(), evictions);
  // Every page came in by a fault (or the one promote) and left by an
  // eviction, except those resident now: the books balance.
  ASSERT_TRUE(events_.WaitForFaults(Get(counters_.faults)));
  EXPECT_EQ(Get(counters_.faults) + Get(counters_.promoted_pages), evictions + kCapacityPages);
  EXPECT_EQ(Get(counters_.device_used_bytes) + Get(counters_.host_used_bytes), kPages * kPage);
  dev->DestroyRegion(r);
}

TEST_F(SimDeviceTest, DemotingAPageUnderAWriterLosesNothing) {
  constexpr size_t kPage = 2 * kMiB;
  auto dev = MakeDevice(4 * kPage);
  ASSERT_TRUE(dev);
  Result<RegionPtr> made = dev->CreateRegion(12, 2 * kPage, kPage, "hot");
  ASSERT_TRUE(made.ok()) << made.status().message();
  Region& r = *made.value();
  constexpr size_t kWords = kPage / 8;
  auto* words = reinterpret_cast<volatile uint64_t*>(PageBase(r, 1));

  std::atomic<bool> stop{false};
  std::atomic<uint64_t> progress{0};
  uint64_t last = 0;
  std::thread writer([&] {
    uint64_t v = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      ++v;
      words[0] = v;  // spread over the page: first, middle and last base pages
      words[kWords / 2 + 3] = v;
      words[kWords - 1] = v;
      progress.store(v, std::memory_order_release);
    }
    last = v;
  });
  constexpr int kDemotes = 200;
  for (int i = 0; i < kDemotes; ++i) {
    // Let the writer get through at least one more store between demotes.
    const uint64_t seen = progress.load(std::memory_order_acquire);
    while (progress.load(std::memory_order_acquire) == seen) std::this_thread::yield();
    ASSERT_TRUE(dev->Demote(r, 1).ok());
  }
  stop.store(true);
  writer.join();
  EXPECT_GT(last, 0u);
  EXPECT_EQ(words[0], last);
  EXPECT_EQ(words[kWords / 2 + 3], last);
  EXPECT_EQ(words[kWords - 1], last);
  const uint64_t* alias = reinterpret_cast<const uint64_t*>(dev->AliasOf(r) + kPage);
  EXPECT_EQ(alias[kWords - 1], last);
  EXPECT_GE(Get(counters_.demoted_pages), 1u);
  EXPECT_LE(Get(counters_.demoted_pages), static_cast<uint64_t>(kDemotes));
  dev->DestroyRegion(r);
}

TEST_F(SimDeviceTest, DestroyRegionWhileMovesRace) {
  constexpr size_t kPage = 64 * kKiB;
  constexpr uint32_t kPages = 8;
  auto dev = MakeDevice(4 * kPage);
  ASSERT_TRUE(dev);
  Result<RegionPtr> made = dev->CreateRegion(17, kPages * kPage, kPage, "racing");
  ASSERT_TRUE(made.ok()) << made.status().message();
  RegionPtr r = made.value();
  for (uint32_t p = 0; p < kPages; ++p) WritePattern(PageBase(*r, p), kPage, p);

  std::atomic<bool> stop{false};
  std::atomic<uint64_t> calls{0};
  std::atomic<uint64_t> refused{0};
  std::thread mover([&] {
    for (uint32_t i = 0; !stop.load(); ++i) {
      const uint32_t p = i % kPages;
      Status s = (i / kPages) % 2 ? dev->Demote(*r, p) : dev->Promote(*r, p);
      if (!s.ok()) refused.fetch_add(1);
      calls.fetch_add(1);
    }
  });
  auto wait_calls = [&](uint64_t n) {
    while (calls.load() < n) std::this_thread::yield();
  };
  wait_calls(100);
  dev->DestroyRegion(*r);
  const uint64_t at_destroy = calls.load();
  wait_calls(at_destroy + 10);  // some calls surely after the destroy
  stop.store(true);
  mover.join();
  EXPECT_GE(refused.load(), 9u);
  EXPECT_EQ(dev->resident_bytes(), 0u);
  EXPECT_EQ(Get(counters_.device_used_bytes), 0u);
  EXPECT_EQ(Get(counters_.host_used_bytes), 0u);
}

TEST_F(SimDeviceTest, ForkedChildSeesTheBytesAndTheDeviceRefusesWork) {
  constexpr size_t kPage = 64 * kKiB;
  auto dev = MakeDevice(4 * kPage);
  ASSERT_TRUE(dev);
  Result<RegionPtr> made = dev->CreateRegion(13, 2 * kPage, kPage, "forked");
  ASSERT_TRUE(made.ok()) << made.status().message();
  Region& r = *made.value();
  WritePattern(PageBase(r, 0), kPage, 77);
  ASSERT_TRUE(events_.WaitForFaults(1));
  ASSERT_TRUE(dev->Demote(r, 0).ok());

  fflush(nullptr);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    dev->AfterForkInChild();
    int code = 0;
    if (dev->Demote(r, 0).ok() || dev->Promote(r, 1).ok()) code |= 1;
    if (dev->CreateRegion(14, kPage, kPage, "child").ok()) code |= 2;
    // No registration in the child: the touch maps the shared bytes itself.
    if (CheckPattern(PageBase(r, 0), kPage, 77) != -1) code |= 4;
    _exit(code);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "bit 1: moves allowed, 2: regions allowed, 4: bytes wrong";
  // The parent is unaffected.
  EXPECT_EQ(TierOf(r, 0), Tier::kHost);
  EXPECT_EQ(CheckPattern(PageBase(r, 0), kPage, 77), -1);
  ASSERT_TRUE(events_.WaitForFaults(2));
  EXPECT_EQ(events_.faults()[1].from, Tier::kHost);
  dev->DestroyRegion(r);
}

TEST_F(SimDeviceTest, WorksWithoutPrivilege) {
  if (getuid() != 0) KVTIER_SKIP_WITHOUT("needs root to switch to an unprivileged user");
  fflush(nullptr);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(10);
    prctl(PR_SET_DUMPABLE, 1);  // keep /proc/self readable for the sanitizers
    MemfdDeviceConfig config;
    config.capacity_bytes = 2 * kMiB;
    Result<std::unique_ptr<MemfdDevice>> dev = MemfdDevice::Create(config);
    if (!dev.ok()) {
      fprintf(stderr, "%s\n", dev.status().message().c_str());
      _exit(11);
    }
    Result<RegionPtr> r = dev.value()->CreateRegion(1, 4 * kMiB, 1 * kMiB, "nobody");
    if (!r.ok()) _exit(12);
    WritePattern(PageBase(*r.value(), 3), kMiB, 5);
    if (!dev.value()->Demote(*r.value(), 3).ok()) _exit(13);
    if (CheckPattern(PageBase(*r.value(), 3), kMiB, 5) != -1) _exit(14);
    fprintf(stderr, "unprivileged: user-mode-only faults: %s\n",
            dev.value()->user_mode_only() ? "yes" : "no");
    dev.value()->DestroyRegion(*r.value());
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10: setuid, 11: Create, 12: region, 13: demote, 14: bytes";
}

// Prints what a simulated GPU page fault costs on this machine. Asserts only
// that the faults happened; the numbers are for people (docs/design.md section 4).
TEST_F(SimDeviceTest, MeasureFaultCostPer2MiBPage) {
  constexpr size_t kPage = 2 * kMiB;
  constexpr uint32_t kPages = 12;
  auto dev = MakeDevice(kPages * kPage);
  ASSERT_TRUE(dev);
  Result<RegionPtr> made = dev->CreateRegion(15, kPages * kPage, kPage, "timing");
  ASSERT_TRUE(made.ok()) << made.status().message();
  Region& r = *made.value();

  auto touch = [&](uint32_t p) { *reinterpret_cast<volatile uint8_t*>(PageBase(r, p) + 100) = 1; };
  Clock::time_point t0 = Clock::now();
  for (uint32_t p = 0; p < kPages; ++p) touch(p);
  const double missing_us = MicrosSince(t0) / kPages;
  ASSERT_TRUE(events_.WaitForFaults(kPages));

  for (uint32_t p = 0; p < kPages; ++p) ASSERT_TRUE(dev->Demote(r, p).ok());
  t0 = Clock::now();
  for (uint32_t p = 0; p < kPages; ++p) touch(p);
  const double minor_us = MicrosSince(t0) / kPages;
  ASSERT_TRUE(events_.WaitForFaults(2 * kPages));
  std::vector<RecordingEvents::Fault> faults = events_.faults();
  double handler_us = 0;
  for (uint32_t i = kPages; i < 2 * kPages; ++i) {
    EXPECT_EQ(faults[i].from, Tier::kHost);
    handler_us += faults[i].wait_ns / 1e3;
  }
  handler_us /= kPages;

  t0 = Clock::now();
  for (uint32_t p = 0; p < kPages; ++p) ASSERT_TRUE(dev->Demote(r, p).ok());
  const double demote_us = MicrosSince(t0) / kPages;
  t0 = Clock::now();
  for (uint32_t p = 0; p < kPages; ++p) ASSERT_TRUE(dev->Promote(r, p).ok());
  const double promote_us = MicrosSince(t0) / kPages;
  EXPECT_EQ(Get(counters_.faults), 2u * kPages);
  dev->DestroyRegion(r);

  // The same first touch filled with UFFDIO_COPY from zeros.
  auto copy_dev = MakeDevice(kPages * kPage, 1, /*copy_fill=*/true);
  ASSERT_TRUE(copy_dev);
  Result<RegionPtr> copied = copy_dev->CreateRegion(16, kPages * kPage, kPage, "timing-copy");
  ASSERT_TRUE(copied.ok()) << copied.status().message();
  t0 = Clock::now();
  for (uint32_t p = 0; p < kPages; ++p) {
    *reinterpret_cast<volatile uint8_t*>(PageBase(*copied.value(), p) + 100) = 1;
  }
  const double copy_us = MicrosSince(t0) / kPages;
  ASSERT_TRUE(events_.WaitForFaults(3 * kPages));
  copy_dev->DestroyRegion(*copied.value());

  printf(
      "simulated GPU, per 2 MiB page: first touch (MISSING) %.0f us with UFFDIO_ZEROPAGE, "
      "%.0f us with UFFDIO_COPY; touch after demote (MINOR, UFFDIO_CONTINUE) %.0f us, of "
      "which %.0f us in the handler; demote (MADV_DONTNEED) %.0f us; promote (prefetch) "
      "%.0f us\n",
      missing_us, copy_us, minor_us, handler_us, demote_us, promote_us);
}

}  // namespace
}  // namespace kvtier::testing
