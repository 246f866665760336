// The restore pipeline of the data-backed device (memfd_restore.cc), one
// mechanism at a time: a run of spilled pages comes back in few reads ahead
// of its touches; reads far apart in the file are in flight together; a
// fault while another read is held is served meanwhile; a page back from disk
// keeps its copy and leaves again unwritten until it changes (a write to it
// caught by its write protection, or its hash where there is none), even a
// write right after the pipeline's copy, before the page is booked; the stride
// learned from where faults start brings a session's span back in every
// layer, and the pages a write fault appends to come back writable; a
// session that returns after its neighbour in the buffer reads its own
// cells first; copies written ahead make the next eviction free; a
// pipeline queue that breaks mid-restore loses nothing.
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <vector>

#include "runtime/device/memfd/memfd_device.h"
#include "runtime/storage/page_io.h"
#include "tests/sim/sim_disk_test_util.h"

namespace kvtier::testing {
namespace {

constexpr uint64_t kHoldTimeoutNs = 20'000'000'000;

// Spills every page of `r` in one call (the store lays them out in page
// order, side by side).
void SpillAll(MemfdDevice& dev, Region& r) {
  std::vector<PageRef> refs;
  for (uint32_t p = 0; p < r.pages.size(); ++p) refs.push_back({&r, p});
  std::vector<Status> results(refs.size());
  dev.SpillPages(refs, results);
  for (size_t i = 0; i < results.size(); ++i) {
    EXPECT_TRUE(results[i].ok()) << i << ": " << results[i].message();
  }
}

// Until the restore pipeline waits for work with nothing under way (not
// still starting up, say, when it would see queued pages without a wake).
void WaitUntilRestorerIdle(const MemfdDevice& dev) {
  const auto deadline = std::chrono::steady_clock::now() + kEventDeadline;
  while (!dev.RestorerIdle() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  ASSERT_TRUE(dev.RestorerIdle());
}

// With two fault threads: page 0's fault thread reads it itself, held (the
// pipeline is woken only once that read ends); meanwhile another thread
// touches `page`, until that touch returns or its fault waits for another
// read (coalesced). Then the hold ends. What each touch read is checked
// by the caller.
struct HeldTouch {
  bool back_while_held = false;  // `page` came back while page 0's read held
  uint64_t coalesced = 0;        // faults that waited for another's read
  int64_t bad[2] = {0, 0};       // CheckPattern of page 0 and of `page`
};
HeldTouch TouchWhilePage0IsHeld(FaultEnv& env, const MemfdDevice& dev, Region& r, uint32_t page) {
  HeldTouch out;
  env.HoldSlow();
  env.Arm(Fault::kSlow, 1);  // page 0's read
  std::thread a([&] {
    out.bad[0] = CheckPattern(PageBase(r, 0), SimDiskTest::kPage, SimDiskTest::Seed(0, 1));
  });
  EXPECT_TRUE(env.WaitForHeld(1, kHoldTimeoutNs)) << "page 0's read never started";
  std::atomic<bool> b_done{false};
  std::thread b([&] {
    out.bad[1] = CheckPattern(PageBase(r, page), SimDiskTest::kPage, SimDiskTest::Seed(page, 1));
    b_done = true;
  });
  const auto deadline = std::chrono::steady_clock::now() + kEventDeadline;
  while (!b_done && dev.coalesced_faults() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();  // a condition: a fault thread answers it
  }
  out.back_while_held = b_done;
  out.coalesced = dev.coalesced_faults();
  env.ReleaseHeld();
  a.join();
  b.join();
  return out;
}

bool Protectable(const Region& r) {
  return static_cast<const MemfdRegion*>(r.backend)->protectable;
}
bool Unwritten(const Region& r, uint32_t page) {
  return (r.pages[page].flags.load() & kPageUnwritten) != 0;
}

// Four "layers" of 48 pages in one region, as llama.cpp's one KV buffer
// holds each layer's K and V side by side.
constexpr uint32_t kLayer = 48, kLayers = 4, kLayerPages = kLayer * kLayers;

// Fills region `r` of kLayerPages pages as an engine would, then spills it
// all: two steps write their new KV into the same cells of every layer,
// one layer after another (faults start runs a layer apart: the device
// learns the stride), then the other pages are written.
void FillLayersAndSpill(MemfdDevice& dev, Region& r) {
  constexpr size_t kPage = SimDiskTest::kPage;
  for (uint32_t cell : {2u, 10u}) {
    for (uint32_t l = 0; l < kLayers; ++l) {
      const uint32_t p = l * kLayer + cell;
      WritePattern(PageBase(r, p), kPage, SimDiskTest::Seed(p, 1));
    }
  }
  for (uint32_t p = 0; p < kLayerPages; ++p) {
    if (p % kLayer != 2 && p % kLayer != 10) {
      WritePattern(PageBase(r, p), kPage, SimDiskTest::Seed(p, 1));
    }
  }
  for (uint32_t p = 0; p < kLayerPages; ++p) ASSERT_TRUE(dev.Demote(r, p).ok());
  SpillAll(dev, r);
}

TEST_F(SimDiskTest, ARunOfSpilledPagesComesBackInFewReadsAheadOfItsTouches) {
  constexpr uint32_t kPages = 32;
  // KVTIER_PAGE_SIZE's default: neighbours share a read.
  constexpr size_t kSmallPage = 64 * kKiB;
  constexpr size_t kRunPages = kMaxRestoreReadBytes / kSmallPage;
  static_assert(kRunPages >= 2);
  SpillStore* store = MakeStore(64, kSmallPage);
  ASSERT_TRUE(store);
  auto dev = MakeDevice(64 * kPage, 1, false, store);
  ASSERT_TRUE(dev);
  RegionPtr region = HostRegion(*dev, 20, kPages, kSmallPage);
  ASSERT_TRUE(region);
  Region& r = *region;
  SpillAll(*dev, r);
  for (uint32_t p = 0; p < kPages; ++p) ASSERT_EQ(TierOf(r, p), Tier::kDisk) << p;
  const uint64_t reads = env_.requests(IoKind::kRead);

  int64_t bad = -1;
  std::thread engine([&] {
    for (uint32_t p = 0; p < kPages && bad == -1; ++p) {
      const int64_t b = CheckPattern(PageBase(r, p), kSmallPage, Seed(p, 1));
      if (b != -1) bad = p;
    }
  });
  engine.join();
  EXPECT_EQ(bad, -1) << "first page with wrong bytes";
  ASSERT_TRUE(events_.WaitForArrivals(kPages + kPages));
  const size_t faulted = events_.faults().size() - kPages;
  const size_t ahead = events_.ahead().size();
  EXPECT_EQ(faulted + ahead, kPages);
  // Each fault in the stream doubles how far ahead the pipeline reads:
  // most pages arrive before their touch, in reads of several pages (a
  // faulting page is read alone, by its fault thread, and splits at most
  // one run of the rest). About 5 faults on idle cores; on two busy ones
  // (the suite runs two tests at once) the engine thread outran the
  // pipeline's thread to 11 once in 150 runs.
  EXPECT_LE(faulted, kPages / 2);
  EXPECT_EQ(Get(counters_.restored_ahead_pages), ahead);
  EXPECT_LE(env_.requests(IoKind::kRead) - reads,
            faulted + (ahead + kRunPages - 1) / kRunPages + faulted + 1)
      << "neighbours in the file share a read";
  EXPECT_EQ(Get(counters_.restored_pages), kPages);
  EXPECT_EQ(store->copy_slots(), kPages);
}

TEST_F(SimDiskTest, APipelineQueueThatBreaksMidRestoreLosesNothing) {
  // The first fault's page is read on its fault thread; the pipeline's
  // first read breaks the pipeline's queue: what that queue had in flight
  // never comes back through it. The pipeline reads those pages one at a
  // time and takes a new queue for the rest; the engine gets every page
  // right, and a second return goes through the new queue.
  constexpr uint32_t kPages = 32;
  SpillStore* store = MakeStore(64);
  ASSERT_TRUE(store);
  // 64 MiB: an ahead share of 16 MiB, so faults leave the reads to the
  // pipeline (the reads' order is the fault's, then the pipeline's).
  auto dev = MakeDevice(256 * kPage, 1, false, store);
  ASSERT_TRUE(dev);
  RegionPtr region = HostRegion(*dev, 21, kPages);
  ASSERT_TRUE(region);
  Region& r = *region;
  for (int round = 0; round < 2; ++round) {
    if (round > 0) {
      WaitUntilRestorerIdle(*dev);  // round 0's last installs done
      for (uint32_t p = 0; p < kPages; ++p) ASSERT_TRUE(dev->Demote(r, p).ok()) << p;
    }
    SpillAll(*dev, r);
    WaitUntilRestorerIdle(*dev);
    for (uint32_t p = 0; p < kPages; ++p) ASSERT_EQ(TierOf(r, p), Tier::kDisk) << p;
    if (round == 0) env_.BreakQueueAtRead(2);
    for (uint32_t p = 0; p < kPages; ++p) {
      ASSERT_EQ(CheckPattern(PageBase(r, p), kPage, Seed(p, 1)), -1)
          << "round " << round << " page " << p;
    }
    EXPECT_FALSE(env_.queue_break_armed()) << "no queue took the break";
    // (A read the broken queue completed but never handed out is read
    // again: at least every page.)
    EXPECT_GE(Get(counters_.restored_pages), (round + 1) * kPages);
    EXPECT_EQ(Get(counters_.restore_errors), 0u);
    EXPECT_FALSE(static_cast<const MemfdRegion*>(r.backend)->degraded);
  }
}

TEST_F(SimDiskTest, PagesApartInTheFileAreReadWithSeveralReadsInFlight) {
  SpillStore* store = MakeStore(16);
  ASSERT_TRUE(store);
  auto dev = MakeDevice(16 * kPage, 1, false, store);
  ASSERT_TRUE(dev);
  RegionPtr region = HostRegion(*dev, 21, 8);
  ASSERT_TRUE(region);
  Region& r = *region;
  // One page at a time from the last: page p sits in slot 7 - p, so no two
  // neighbours in the region are neighbours in the file.
  for (uint32_t p = 8; p-- > 0;) ASSERT_TRUE(dev->Spill(r, p).ok());
  EXPECT_EQ(env_.max_in_flight(), 1u) << "single spills use one request at a time";
  EXPECT_EQ(CheckPattern(PageBase(r, 0), kPage, Seed(0, 1)), -1);
  // Page 0's fault brought the first window (512 KiB: pages 1 and 2) with
  // it: its fault thread read page 0, and the pipeline the other two, in
  // reads in flight at once.
  ASSERT_TRUE(events_.WaitForArrivals(8 + 3));
  EXPECT_GE(env_.max_in_flight(), 2u);
  for (uint32_t p = 0; p < 3; ++p) EXPECT_EQ(TierOf(r, p), Tier::kDevice) << p;
  for (uint32_t p = 3; p < 8; ++p) EXPECT_EQ(TierOf(r, p), Tier::kDisk) << p;
}

// How far a stream reads ahead is a number of bytes, not of pages: with
// KVTIER_PAGE_SIZE four times larger, 64 pages ahead would be four llama.cpp
// sessions' span of a layer (read, then evicted again before their turn).
class SimDiskWindowTest : public SimDiskTest {
 protected:
  void FirstFaultReadsAhead(size_t page_size) {
    constexpr uint32_t kPages = 32;
    SpillStore* store = MakeStore(kPages, page_size);
    ASSERT_TRUE(store);
    auto dev = MakeDevice(2 * kPages * kPage, 1, false, store);
    ASSERT_TRUE(dev);
    Result<RegionPtr> made = dev->CreateRegion(29, kPages * page_size, page_size, "kv-window");
    ASSERT_TRUE(made.ok()) << made.status().message();
    Region& r = *made.value();
    for (uint32_t p = 0; p < kPages; ++p) WritePattern(PageBase(r, p), page_size, Seed(p, 1));
    for (uint32_t p = 0; p < kPages; ++p) ASSERT_TRUE(dev->Demote(r, p).ok());
    SpillAll(*dev, r);
    const RecordingEvents::Mark before = events_.MarkNow();
    EXPECT_EQ(CheckPattern(PageBase(r, 0), page_size, Seed(0, 1)), -1);
    // The faulting page and a first window of 512 KiB after it, in one
    // install (neighbours in the file): nothing more without another fault.
    const uint32_t window = static_cast<uint32_t>((size_t{512} << 10) / page_size);
    ASSERT_TRUE(events_.WaitForPagesBackFromDisk(before, r.id, 0, 1 + window));
    for (uint32_t p = 0; p <= window; ++p) EXPECT_EQ(TierOf(r, p), Tier::kDevice) << p;
    for (uint32_t p = window + 1; p < kPages; ++p) EXPECT_EQ(TierOf(r, p), Tier::kDisk) << p;
    dev->DestroyRegion(r);
  }
};

TEST_F(SimDiskWindowTest, AFirstFaultReads512KiBAheadIn64KiBPages) {
  FirstFaultReadsAhead(64 * kKiB);
}

TEST_F(SimDiskWindowTest, AFirstFaultReads512KiBAheadIn256KiBPages) {
  FirstFaultReadsAhead(256 * kKiB);
}

// A stream read in order for 32 MiB reads further ahead than
// kMaxWindowBytes (4 MiB, 16 of these pages): a quarter of how far it was
// followed. Four MiB in flight at a time kept a whole region read in order
// below the disk's speed. A second region is read in step, so that the
// faults' run starts alternate between the two and teach no stride (with
// one region they fell a window apart now and then, and the stride's
// replicas read the rest of it ahead); its size differs, so that no
// replica falls in it either.
TEST_F(SimDiskWindowTest, AStreamFollowedFarReadsFurtherAhead) {
  constexpr uint32_t kPages = 200;     // 50 MiB
  constexpr uint32_t kFollowed = 128;  // 32 MiB of each read in order first
  SpillStore* store = MakeStore(2 * kPages + 1);
  ASSERT_TRUE(store);
  auto dev = MakeDevice((2 * kPages + 1) * kPage, 1, false, store);
  ASSERT_TRUE(dev);
  RegionPtr a_region = HostRegion(*dev, 24, kPages);
  RegionPtr b_region = HostRegion(*dev, 25, kPages + 1);
  ASSERT_TRUE(a_region && b_region);
  Region& a = *a_region;
  Region& b = *b_region;
  SpillAll(*dev, a);
  SpillAll(*dev, b);
  for (uint32_t p = 0; p < kFollowed; ++p) {
    ASSERT_EQ(CheckPattern(PageBase(a, p), kPage, Seed(p, 1)), -1) << p;
    ASSERT_EQ(CheckPattern(PageBase(b, p), kPage, Seed(p, 1)), -1) << p;
  }
  // Once what the streams read ahead is in: a's next page still on disk.
  WaitUntilRestorerIdle(*dev);
  uint32_t next = kFollowed;
  while (next < kPages && TierOf(a, next) != Tier::kDisk) ++next;
  ASSERT_LT(next + 32, kPages) << "the stream read to the end already";
  // Its fault thread reads it (not held); then the pipeline submits the
  // reads of what follows, 8 pages a read, and is held reaping the first:
  // 16 pages ahead would be 2 reads.
  env_.HoldSlow();
  env_.Arm(Fault::kSlow, 100, /*skip=*/1);
  const uint64_t reads = env_.requests(IoKind::kRead);
  int64_t bad = 0;
  std::thread touch([&] { bad = CheckPattern(PageBase(a, next), kPage, Seed(next, 1)); });
  EXPECT_TRUE(env_.WaitForHeld(1, kHoldTimeoutNs)) << "no read ahead";
  EXPECT_GE(env_.requests(IoKind::kRead) - reads, 1u + 4u) << "its own read, and 4 of 8 pages";
  env_.ReleaseHeld();
  touch.join();
  EXPECT_EQ(bad, -1);
  for (uint32_t p = next; p < kPages; ++p) {
    ASSERT_EQ(CheckPattern(PageBase(a, p), kPage, Seed(p, 1)), -1) << p;
  }
  dev->DestroyRegion(a);
  dev->DestroyRegion(b);
}

TEST_F(SimDiskTest, AFaultWhileAnotherReadIsHeldIsServedMeanwhile) {
  SpillStore* store = MakeStore(32);
  ASSERT_TRUE(store);
  // Two fault threads: the one reading page 0 itself is held with it.
  auto dev = MakeDevice(32 * kPage, 2, false, store);
  ASSERT_TRUE(dev);
  RegionPtr region = HostRegion(*dev, 22, 16);
  ASSERT_TRUE(region);
  Region& r = *region;
  for (uint32_t p : {0u, 12u}) ASSERT_TRUE(dev->Spill(r, p).ok());
  // Page 12 comes back while page 0's read still holds (the other fault
  // thread reads it).
  const HeldTouch out = TouchWhilePage0IsHeld(env_, *dev, r, 12);
  EXPECT_TRUE(out.back_while_held) << "page 12 waited for page 0's read";
  EXPECT_EQ(out.bad[0], -1);
  EXPECT_EQ(out.bad[1], -1);
  EXPECT_EQ(Get(counters_.restored_pages), 2u);
}

// Two fault threads. Page 0's fault thread reads it itself, held, having
// queued pages 1 and 2 for the pipeline, which is woken only once that read
// ends. Then page 2, queued, is touched: its fault thread takes the read
// back only where the pipeline could not start it soon (a device too small
// for the 16 MiB the pipeline may have started); on a larger one it reads
// it with page 1, once woken.
class SimDiskTakeBackTest : public SimDiskTest {
 protected:
  HeldTouch TouchAQueuedPage(uint32_t device_pages) {
    HeldTouch out;
    SpillStore* store = MakeStore(16);
    if (!store) return out;
    auto dev = MakeDevice(device_pages * kPage, 2, false, store);
    if (!dev) return out;
    RegionPtr region = HostRegion(*dev, 23, 16);
    if (!region) return out;
    Region& r = *region;
    SpillAll(*dev, r);
    WaitUntilRestorerIdle(*dev);
    out = TouchWhilePage0IsHeld(env_, *dev, r, 2);
    EXPECT_EQ(out.bad[0], -1);
    EXPECT_EQ(out.bad[1], -1);
    EXPECT_EQ(CheckPattern(PageBase(r, 1), kPage, Seed(1, 1)), -1);
    dev->DestroyRegion(r);
    return out;
  }
};

TEST_F(SimDiskTakeBackTest, AQueuedPageThePipelineCanStartIsLeftToIt) {
  // 64 MiB: an ahead share of 16 MiB, the most the pipeline may have
  // started (read or reading).
  const HeldTouch out = TouchAQueuedPage(256);
  EXPECT_FALSE(out.back_while_held) << "the fault thread read page 2 itself";
  EXPECT_EQ(out.coalesced, 1u);
}

TEST_F(SimDiskTakeBackTest, OnADeviceTooSmallForThePipelineAFaultThreadReadsItsQueuedPage) {
  // 4 MiB: an ahead share of 1 MiB.
  const HeldTouch out = TouchAQueuedPage(16);
  EXPECT_TRUE(out.back_while_held) << "page 2 waited for page 0's read";
  EXPECT_EQ(out.coalesced, 0u);
}

TEST_F(SimDiskTest, APageBackFromDiskLeavesAgainWithoutAWriteUntilItChanges) {
  SpillStore* store = MakeStore(8);
  ASSERT_TRUE(store);
  auto dev = MakeDevice(8 * kPage, 1, false, store);
  ASSERT_TRUE(dev);
  RegionPtr region = HostRegion(*dev, 23, 1);
  ASSERT_TRUE(region);
  Region& r = *region;
  ASSERT_TRUE(dev->Spill(r, 0).ok());
  EXPECT_EQ(CheckPattern(PageBase(r, 0), kPage, Seed(0, 1)), -1);
  ASSERT_TRUE(events_.WaitForArrivals(1 + 1));
  EXPECT_NE(r.pages[0].flags.load() & kPageDiskCopy, 0);
  EXPECT_EQ(Get(counters_.disk_copy_bytes), kPage);
  EXPECT_EQ(Get(counters_.spilled_pages), 1u);

  // Unchanged: it leaves again with no write, its copy its only one again.
  ASSERT_TRUE(dev->Demote(r, 0).ok());
  ASSERT_TRUE(dev->Spill(r, 0).ok());
  EXPECT_EQ(TierOf(r, 0), Tier::kDisk);
  EXPECT_EQ(Get(counters_.spilled_pages), 1u);
  EXPECT_EQ(Get(counters_.spill_clean_pages), 1u);
  EXPECT_EQ(MemfdBytes(r), 0u);
  EXPECT_EQ(Get(counters_.disk_used_bytes), kPage);
  EXPECT_EQ(Get(counters_.disk_copy_bytes), 0u);
  EXPECT_EQ(CheckPattern(PageBase(r, 0), kPage, Seed(0, 1)), -1);
  ASSERT_TRUE(events_.WaitForArrivals(1 + 2));

  // Changed: the copy is stale, so it is written again, and the new bytes
  // come back.
  WritePattern(PageBase(r, 0), kPage, Seed(0, 2));
  ASSERT_TRUE(dev->Demote(r, 0).ok());
  ASSERT_TRUE(dev->Spill(r, 0).ok());
  EXPECT_EQ(TierOf(r, 0), Tier::kDisk);
  EXPECT_EQ(Get(counters_.spilled_pages), 2u);
  EXPECT_EQ(Get(counters_.spill_clean_pages), 1u);
  EXPECT_EQ(store->used_slots(), 1u) << "the stale copy's slot was freed";
  EXPECT_EQ(CheckPattern(PageBase(r, 0), kPage, Seed(0, 2)), -1);
}

// A page back from disk is mapped write-protected: reads leave it known
// unchanged, the first write raises one write fault that says otherwise,
// and then the page is written again as it leaves. Without write protection
// (MemfdDeviceConfig::write_protect off) its hash says the same.
class SimDiskWriteTest : public SimDiskTest {
 protected:
  void WriteAfterRestore(bool protect) {
    SpillStore* store = MakeStore(8);
    ASSERT_TRUE(store);
    MemfdDeviceConfig config;
    config.write_protect = protect;
    auto dev = MakeDevice(8 * kPage, 1, false, store, config);
    ASSERT_TRUE(dev);
    RegionPtr region = HostRegion(*dev, 27, 2);
    ASSERT_TRUE(region);
    Region& r = *region;
    if (protect && !Protectable(r)) {
      KVTIER_SKIP_WITHOUT(
          "userfaultfd cannot write-protect shmem here (Linux 5.19+, and "
          "kernel-mode faults caught)");
    }
    ASSERT_EQ(Protectable(r), protect);
    for (uint32_t p = 0; p < 2; ++p) ASSERT_TRUE(dev->Spill(r, p).ok());
    for (uint32_t p = 0; p < 2; ++p) {
      EXPECT_EQ(CheckPattern(PageBase(r, p), kPage, Seed(p, 1)), -1) << p;
    }
    ASSERT_TRUE(events_.WaitForArrivals(2 + 2));
    for (uint32_t p = 0; p < 2; ++p) EXPECT_EQ(Unwritten(r, p), protect) << p;
    EXPECT_EQ(dev->write_faults(), 0u) << "reads raise no write fault";

    // Page 1 changes in its last two bytes: one write fault, then none.
    PageBase(r, 1)[kPage - 1] ^= 0xff;
    PageBase(r, 1)[kPage - 2] ^= 0xff;
    EXPECT_EQ(dev->write_faults(), protect ? 1u : 0u);
    EXPECT_FALSE(Unwritten(r, 1));
    EXPECT_EQ(Unwritten(r, 0), protect);

    // Page 0 leaves without a write; page 1 is written with its new bytes.
    for (uint32_t p = 0; p < 2; ++p) {
      ASSERT_TRUE(dev->Demote(r, p).ok());
      ASSERT_TRUE(dev->Spill(r, p).ok());
      EXPECT_EQ(TierOf(r, p), Tier::kDisk) << p;
    }
    EXPECT_EQ(Get(counters_.spill_clean_pages), 1u);
    EXPECT_EQ(Get(counters_.spilled_pages), 3u);
    EXPECT_EQ(CheckPattern(PageBase(r, 0), kPage, Seed(0, 1)), -1);
    std::vector<uint8_t> expected(kPage);
    WritePattern(expected.data(), kPage, Seed(1, 1));
    expected[kPage - 1] ^= 0xff;
    expected[kPage - 2] ^= 0xff;
    EXPECT_EQ(memcmp(PageBase(r, 1), expected.data(), kPage), 0);
  }
};

TEST_F(SimDiskWriteTest, AWriteToAPageBackFromDiskIsCaughtByItsWriteProtection) {
  WriteAfterRestore(true);
}

TEST_F(SimDiskWriteTest, AWriteToAPageBackFromDiskIsCaughtByItsHashWithoutProtection) {
  WriteAfterRestore(false);
}

// The pipeline copies a run in without the device lock and books it after:
// a write in between (its write fault handled meanwhile) must leave the
// page known written, or it would leave memory again without its new bytes.
// Whether the page of `addr` has a PTE in this process (/proc/self/pagemap
// bit 63: present).
bool PteMapped(const void* addr) {
  const int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  uint64_t entry = 0;
  const off_t at = static_cast<off_t>(reinterpret_cast<uintptr_t>(addr) / BasePageSize() * 8);
  const bool read_ok = pread(fd, &entry, sizeof entry, at) == static_cast<ssize_t>(sizeof entry);
  close(fd);
  return read_ok && (entry >> 63) != 0;
}

TEST_F(SimDiskTest, APageReadAheadIsJudgedByItsTouchExactly) {
  constexpr uint32_t kPages = 16, kTouched = 1;
  SpillStore* store = MakeStore(32);
  ASSERT_TRUE(store);
  MemfdDeviceConfig config;
  config.park_every = 1;  // every page read ahead: exact counts
  auto dev = MakeDevice(32 * kPage, 1, false, store, config);
  ASSERT_TRUE(dev);
  RegionPtr region = HostRegion(*dev, 32, kPages);
  ASSERT_TRUE(region);
  Region& r = *region;
  SpillAll(*dev, r);
  // A touch of page 0: the pipeline reads the pages after it ahead (woken
  // once the fault thread's own read of page 0 ends, maybe after the touch
  // returns: page 1's arrival says it ran).
  EXPECT_EQ(CheckPattern(PageBase(r, 0), kPage, Seed(0, 1)), -1);
  ASSERT_TRUE(WaitForTier(r, 1, Tier::kDevice)) << "page 1 was never read ahead";
  WaitUntilRestorerIdle(*dev);
  const uint64_t ahead = Get(counters_.restored_ahead_pages);
  ASSERT_GT(ahead, kTouched) << "too little was read ahead for the test";  // 2 here
  std::vector<uint32_t> parked;
  for (uint32_t p = 1; p < kPages; ++p) {
    if (r.pages[p].tier.load() != Tier::kDevice) continue;
    parked.push_back(p);
    // In memory, and not mapped until the engine touches it.
    EXPECT_FALSE(PteMapped(PageBase(r, p))) << "page " << p << " was mapped before its touch";
  }
  ASSERT_EQ(parked.size(), ahead);
  EXPECT_EQ(Get(counters_.readahead_used_pages), 0u);
  EXPECT_EQ(Get(counters_.readahead_vain_pages), 0u);

  // The engine touches some of them: mapped now, with the right bytes,
  // and still known unchanged since their copy where the kernel maps them
  // write-protected (no hash when they leave).
  for (uint32_t i = 0; i < kTouched; ++i) {
    const uint32_t p = parked[i];
    EXPECT_EQ(CheckPattern(PageBase(r, p), kPage, Seed(p, 1)), -1) << p;
    EXPECT_TRUE(PteMapped(PageBase(r, p))) << p;
    if (Protectable(r)) {
      EXPECT_TRUE(Unwritten(r, p)) << p;
    }
  }
  EXPECT_EQ(Get(counters_.readahead_used_pages), kTouched);

  // All of them leave memory: the untouched ones were read in vain, and
  // none needs a write.
  const uint64_t spilled = Get(counters_.spilled_pages);
  for (uint32_t p = 0; p < kPages; ++p) ASSERT_TRUE(dev->Demote(r, p).ok());
  SpillAll(*dev, r);
  EXPECT_EQ(Get(counters_.readahead_vain_pages), ahead - kTouched);
  EXPECT_EQ(Get(counters_.spilled_pages), spilled);
  for (uint32_t p = 0; p < kPages; ++p) {
    EXPECT_EQ(CheckPattern(PageBase(r, p), kPage, Seed(p, 1)), -1) << p;
  }
}

TEST_F(SimDiskTest, ReadAheadWindowsShrinkWhenInVainAndGrowBackWhenTheyPay) {
  constexpr uint32_t kPages = 16;
  SpillStore* store = MakeStore(64);
  ASSERT_TRUE(store);
  MemfdDeviceConfig config;
  config.park_every = 1;  // every page read ahead is judged
  auto dev = MakeDevice(40 * kPage, 1, false, store, config);
  ASSERT_TRUE(dev);
  // A region of kPages, spilled whole; a touch of its page 0 starts a new
  // stream. Returns how many pages that touch read ahead.
  auto touch_first = [&](RegionId id, RegionPtr* out) -> uint64_t {
    RegionPtr r = HostRegion(*dev, id, kPages);
    if (!r) return 0;
    SpillAll(*dev, *r);
    const uint64_t before = Get(counters_.restored_ahead_pages);
    EXPECT_EQ(CheckPattern(PageBase(*r, 0), kPage, Seed(0, 1)), -1);
    EXPECT_TRUE(WaitForTier(*r, 1, Tier::kDevice)) << "page 1 was never read ahead";
    WaitUntilRestorerIdle(*dev);
    *out = r;
    return Get(counters_.restored_ahead_pages) - before;
  };
  // A touch of page 0 reads a stream's first window ahead.
  RegionPtr a;
  const uint64_t first = touch_first(33, &a);
  ASSERT_TRUE(a);
  ASSERT_GE(first, 2u) << "too little was read ahead for the test";
  // None of it is touched before it leaves: all of it was read in vain.
  for (uint32_t p = 0; p < kPages; ++p) ASSERT_TRUE(dev->Demote(*a, p).ok());
  SpillAll(*dev, *a);
  ASSERT_EQ(Get(counters_.readahead_vain_pages), first);
  // The same touch elsewhere reads less ahead.
  RegionPtr b;
  EXPECT_LT(touch_first(34, &b), first);
  ASSERT_TRUE(b);
  for (uint32_t p = 0; p < kPages; ++p) {
    EXPECT_EQ(CheckPattern(PageBase(*a, p), kPage, Seed(p, 1)), -1) << p;
    EXPECT_EQ(CheckPattern(PageBase(*b, p), kPage, Seed(p, 1)), -1) << p;
  }
  dev->DestroyRegion(*a);
  dev->DestroyRegion(*b);

  // Read ahead that pays (a region read in order, every page read ahead
  // touched) grows the windows back: the same touch reads as much ahead as
  // the first did.
  RegionPtr c = HostRegion(*dev, 35, 2 * kPages);
  ASSERT_TRUE(c);
  SpillAll(*dev, *c);
  for (uint32_t p = 0; p < 2 * kPages; ++p) {
    ASSERT_EQ(CheckPattern(PageBase(*c, p), kPage, Seed(p, 1)), -1) << p;
  }
  WaitUntilRestorerIdle(*dev);
  ASSERT_GE(Get(counters_.readahead_used_pages), 32u) << "too little paid for the test";
  const uint64_t vain = Get(counters_.readahead_vain_pages);
  dev->DestroyRegion(*c);
  RegionPtr d;
  EXPECT_EQ(touch_first(36, &d), first);
  ASSERT_TRUE(d);
  EXPECT_EQ(Get(counters_.readahead_vain_pages), vain);
}

TEST_F(SimDiskTest, AWriteBetweenAPipelineCopyAndItsBookingIsKept) {
  constexpr uint32_t kPages = 16, kTarget = 1;
  SpillStore* store = MakeStore(32);
  ASSERT_TRUE(store);
  std::atomic<uintptr_t> target{0};
  std::atomic<bool> wrote{false}, written{false};
  MemfdDeviceConfig config;
  // Mapped at once, as the pages a thread waits on are: a parked page
  // cannot be written before its booking (its touch waits for it).
  config.park_every = 0;
  config.after_unlocked_copy = [&](uintptr_t start, size_t len) {
    const uintptr_t t = target.load();
    if (t == 0 || t < start || t >= start + len || wrote.exchange(true)) return;
    volatile uint8_t* last = reinterpret_cast<volatile uint8_t*>(t) + kPage - 1;
    *last = static_cast<uint8_t>(*last ^ 0xff);
    written = true;
  };
  auto dev = MakeDevice(32 * kPage, 1, false, store, config);
  ASSERT_TRUE(dev);
  RegionPtr region = HostRegion(*dev, 31, kPages);
  ASSERT_TRUE(region);
  Region& r = *region;
  if (!Protectable(r)) {
    KVTIER_SKIP_WITHOUT(
        "userfaultfd cannot write-protect shmem here (Linux 5.19+, and kernel-mode faults "
        "caught)");
  }
  SpillAll(*dev, r);
  target = reinterpret_cast<uintptr_t>(PageBase(r, kTarget));
  // A touch of page 0: the pipeline reads the pages after it, the target's
  // among them, and the seam writes the target right after its copy.
  EXPECT_EQ(CheckPattern(PageBase(r, 0), kPage, Seed(0, 1)), -1);
  const auto deadline = std::chrono::steady_clock::now() + kEventDeadline;
  while (!written && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  ASSERT_TRUE(written) << "the pipeline never installed the target without the lock";
  std::vector<uint8_t> expected(kPage);
  WritePattern(expected.data(), kPage, Seed(kTarget, 1));
  expected[kPage - 1] ^= 0xff;
  for (uint32_t p = 1; p < kPages; ++p) {
    if (p == kTarget) {
      EXPECT_EQ(memcmp(PageBase(r, p), expected.data(), kPage), 0);
    } else {
      EXPECT_EQ(CheckPattern(PageBase(r, p), kPage, Seed(p, 1)), -1) << p;
    }
  }
  EXPECT_EQ(dev->write_faults(), 1u);
  EXPECT_FALSE(Unwritten(r, kTarget));
  for (uint32_t p = 0; p < kPages; ++p) {
    if (p != kTarget) {
      EXPECT_TRUE(Unwritten(r, p)) << p;
    }
  }

  // It leaves with a write, the others without one, and comes back written.
  const uint64_t spilled = Get(counters_.spilled_pages);
  for (uint32_t p = 0; p < kPages; ++p) ASSERT_TRUE(dev->Demote(r, p).ok());
  SpillAll(*dev, r);
  EXPECT_EQ(Get(counters_.spilled_pages) - spilled, 1u);
  EXPECT_EQ(memcmp(PageBase(r, kTarget), expected.data(), kPage), 0);
}

TEST_F(SimDiskTest, AStrideLearnedFromFaultsBringsASpanBackInEveryLayer) {
  SpillStore* store = MakeStore(kLayerPages);
  ASSERT_TRUE(store);
  auto dev = MakeDevice(kLayerPages * kPage, 1, false, store);
  ASSERT_TRUE(dev);
  Result<RegionPtr> made = dev->CreateRegion(24, kLayerPages * kPage, kPage, "kv-layers");
  ASSERT_TRUE(made.ok());
  Region& r = *made.value();
  ASSERT_NO_FATAL_FAILURE(FillLayersAndSpill(*dev, r));

  // The engine reads cells 4..11 of layer 0 only.
  const RecordingEvents::Mark before_reads = events_.MarkNow();
  for (uint32_t p = 4; p < 12; ++p) ASSERT_EQ(CheckPattern(PageBase(r, p), kPage, Seed(p, 1)), -1);
  // The span it faulted on comes back at every layer, untouched.
  for (uint32_t l = 1; l < kLayers; ++l) {
    EXPECT_TRUE(WaitForTier(r, l * kLayer + 4, Tier::kDevice)) << "layer " << l;
  }
  // Layer 0's faults are counted by then (the reader may run on before).
  ASSERT_TRUE(events_.WaitForPagesBackFromDisk(before_reads, r.id, 4, 8));
  const uint64_t faults = Get(counters_.faults);
  for (uint32_t l = 1; l < kLayers; ++l) {
    const uint32_t p = l * kLayer + 4;
    EXPECT_EQ(CheckPattern(PageBase(r, p), kPage, Seed(p, 1)), -1) << p;
  }
  EXPECT_EQ(Get(counters_.faults), faults) << "pages read ahead must not fault";
  // Cells the engine never came near (past the most a stream reads ahead
  // of its last fault, 4 MiB) stay on disk in every layer.
  for (uint32_t l = 0; l < kLayers; ++l) {
    for (uint32_t cell = 12 + (4 << 20) / kPage; cell < kLayer; ++cell) {
      EXPECT_EQ(TierOf(r, l * kLayer + cell), Tier::kDisk) << "layer " << l << " cell " << cell;
    }
  }
}

// An engine appends a step's new KV to the same cells of every layer: a
// write fault on a spilled page maps it writable, and so are its copies at
// the stride (the same cells in the other layers), so that the writes to
// come raise no write fault (each would put an engine thread to sleep);
// the rest of the span comes back write-protected, as any page from disk.
TEST_F(SimDiskTest, ThePagesAWriteFaultAppendsToComeBackWritableInEveryLayer) {
  constexpr uint32_t kCell = 20;
  SpillStore* store = MakeStore(kLayerPages + kLayers);  // room for the written pages' new copies
  ASSERT_TRUE(store);
  auto dev = MakeDevice(kLayerPages * kPage, 1, false, store);
  ASSERT_TRUE(dev);
  Result<RegionPtr> made = dev->CreateRegion(25, kLayerPages * kPage, kPage, "kv-layers");
  ASSERT_TRUE(made.ok());
  Region& r = *made.value();
  if (!Protectable(r)) {
    KVTIER_SKIP_WITHOUT(
        "userfaultfd cannot write-protect shmem here (Linux 5.19+, and kernel-mode faults caught)");
  }
  ASSERT_NO_FATAL_FAILURE(FillLayersAndSpill(*dev, r));

  // The engine returns: it stores a new token in layer 0's cell, which
  // brings back that span (the cells before it) in every layer.
  const RecordingEvents::Mark before = events_.MarkNow();
  PageBase(r, kCell)[0] = 0x5a;
  for (uint32_t l = 0; l < kLayers; ++l) {
    ASSERT_TRUE(events_.WaitForPagesBackFromDisk(before, r.id, l * kLayer + kCell - 1, 2))
        << "layer " << l;
  }
  for (uint32_t l = 0; l < kLayers; ++l) {
    EXPECT_FALSE(Unwritten(r, l * kLayer + kCell)) << "layer " << l;
    EXPECT_TRUE(Unwritten(r, l * kLayer + kCell - 1)) << "layer " << l;
  }
  // It appends in the other layers: no write fault.
  for (uint32_t l = 1; l < kLayers; ++l) PageBase(r, l * kLayer + kCell)[0] = 0x5a;
  EXPECT_EQ(dev->write_faults(), 0u);
  std::vector<uint8_t> expected(kPage);
  for (uint32_t l = 0; l < kLayers; ++l) {
    const uint32_t p = l * kLayer + kCell;
    WritePattern(expected.data(), kPage, Seed(p, 1));
    expected[0] = 0x5a;
    EXPECT_EQ(memcmp(PageBase(r, p), expected.data(), kPage), 0) << "layer " << l;
    EXPECT_EQ(CheckPattern(PageBase(r, p - 1), kPage, Seed(p - 1, 1)), -1) << "layer " << l;
  }
  // The written pages leave with their new bytes; the others without a write.
  for (uint32_t l = 0; l < kLayers; ++l) {
    for (uint32_t p = l * kLayer + kCell - 1; p <= l * kLayer + kCell; ++p) {
      ASSERT_TRUE(dev->Demote(r, p).ok());
      const Status spilled = dev->Spill(r, p);
      ASSERT_TRUE(spilled.ok()) << p << ": " << spilled.message();
    }
  }
  EXPECT_EQ(Get(counters_.spill_clean_pages), kLayers);
  for (uint32_t l = 0; l < kLayers; ++l) {
    const uint32_t p = l * kLayer + kCell;
    WritePattern(expected.data(), kPage, Seed(p, 1));
    expected[0] = 0x5a;
    EXPECT_EQ(memcmp(PageBase(r, p), expected.data(), kPage), 0) << "layer " << l;
  }
}

TEST_F(SimDiskTest, ASessionReturningRightAfterItsNeighbourReadsItsOwnCellsFirst) {
  // Two sessions' cells side by side in one buffer, as llama.cpp keeps
  // them: A in pages 0..11, B in 14..25, each with never-touched cells
  // after it. A comes back, then B: B's first fault (on its last cell) lies
  // within reach of A's stream (16 pages of 256 KiB past what it queued),
  // but B's cells before it are on disk and no read took them, so the
  // fault starts a stream of its own, which reads them ahead of their
  // touches.
  constexpr uint32_t kPages = 40;
  constexpr uint32_t kA = 0, kB = 14, kCells = 12;
  static_assert(kB + kCells - 1 < kA + kCells + (4 << 20) / kPage, "within A's stream's reach");
  SpillStore* store = MakeStore(kPages);
  ASSERT_TRUE(store);
  // Room for four such buffers: pages read ahead of any touch take at most
  // a quarter of the device.
  auto dev = MakeDevice(4 * kPages * kPage, 1, false, store);
  ASSERT_TRUE(dev);
  Result<RegionPtr> made = dev->CreateRegion(30, kPages * kPage, kPage, "kv-sessions");
  ASSERT_TRUE(made.ok());
  Region& r = *made.value();
  std::vector<PageRef> cells;
  for (uint32_t first : {kA, kB}) {
    for (uint32_t p = first; p < first + kCells; ++p) {
      WritePattern(PageBase(r, p), kPage, Seed(p, 1));
      cells.push_back({&r, p});
    }
  }
  for (const PageRef& c : cells) ASSERT_TRUE(dev->Demote(r, c.page).ok());
  std::vector<Status> results(cells.size());
  dev->SpillPages(cells, results);
  for (const Status& s : results) ASSERT_TRUE(s.ok()) << s.message();

  // A returns: its last cell first, then the rest.
  const RecordingEvents::Mark a_back = events_.MarkNow();
  for (uint32_t p = kA + kCells; p-- > kA;) {
    ASSERT_EQ(CheckPattern(PageBase(r, p), kPage, Seed(p, 1)), -1) << p;
  }
  ASSERT_TRUE(events_.WaitForPagesBackFromDisk(a_back, r.id, kA, kCells));
  // B returns: one touch of its last cell brings the others back unasked.
  const RecordingEvents::Mark b_back = events_.MarkNow();
  const uint32_t last = kB + kCells - 1;
  ASSERT_EQ(CheckPattern(PageBase(r, last), kPage, Seed(last, 1)), -1);
  for (uint32_t p = kB; p < last; ++p) EXPECT_TRUE(WaitForTier(r, p, Tier::kDevice)) << p;
  // The last cell's fault is counted by then (the toucher is woken first).
  ASSERT_TRUE(events_.WaitForPagesBackFromDisk(b_back, r.id, kB, kCells));
  const uint64_t faults = Get(counters_.faults);
  for (uint32_t p = kB; p < last; ++p) {
    EXPECT_EQ(CheckPattern(PageBase(r, p), kPage, Seed(p, 1)), -1) << p;
  }
  EXPECT_EQ(Get(counters_.faults), faults) << "B's cells came back ahead of their touches";
  dev->DestroyRegion(r);
}

TEST_F(SimDiskTest, AFirstTouchPopulatesTheNeverTouchedPagesAfterIt) {
  MemfdDeviceConfig config;
  config.fill_ahead_pages = 3;
  auto dev = MakeDevice(16 * kPage, 1, false, nullptr, config);
  ASSERT_TRUE(dev);
  Result<RegionPtr> made = dev->CreateRegion(26, 10 * kPage, kPage, "kv-fill");
  ASSERT_TRUE(made.ok());
  Region& r = *made.value();
  WritePattern(PageBase(r, 5), kPage, Seed(5, 1));  // page 5 touched first
  // A touch of page 2 populates 3, 4 and stops at 5 (not never-touched).
  WritePattern(PageBase(r, 2), kPage, Seed(2, 1));
  ASSERT_TRUE(events_.WaitForArrivals(2 + 3 + 2));
  for (uint32_t p : {2u, 3u, 4u, 5u, 6u, 7u, 8u}) EXPECT_EQ(TierOf(r, p), Tier::kDevice) << p;
  for (uint32_t p : {0u, 1u, 9u}) EXPECT_EQ(TierOf(r, p), Tier::kUntouched) << p;
  EXPECT_EQ(events_.faults().size(), 2u);
  // Populated pages read as zeros and take writes without a fault.
  const uint64_t faults = Get(counters_.faults);
  EXPECT_TRUE(IsAllZero(PageBase(r, 3), kPage));
  WritePattern(PageBase(r, 4), kPage, Seed(4, 1));
  EXPECT_EQ(CheckPattern(PageBase(r, 4), kPage, Seed(4, 1)), -1);
  EXPECT_EQ(Get(counters_.faults), faults);
}

TEST_F(SimDiskTest, AFaultTakesTheStagingsReserveWithoutWaiting) {
  SpillStore* store = MakeStore(32);
  ASSERT_TRUE(store);
  // The host backend's device: a staging of 8 pages, 2 of them the faults'
  // reserve (one fault thread).
  MemfdDeviceConfig config;
  config.host_limit_bytes = 8 * kPage;
  auto dev = MakeDevice(10 * kPage, 1, false, store, config);
  ASSERT_TRUE(dev);
  Result<RegionPtr> made = dev->CreateRegion(26, 24 * kPage, kPage, "kv-reserve");
  ASSERT_TRUE(made.ok());
  Region& r = *made.value();
  for (uint32_t p = 0; p < 10; ++p) WritePattern(PageBase(r, p), kPage, Seed(p, 1));
  // The policy moves eight written pages out: spills keep the reserve free.
  for (uint32_t p = 0; p < 8; ++p) ASSERT_TRUE(dev->Demote(r, p).ok()) << p;
  ASSERT_TRUE(WaitForCounterAtMost(counters_.host_used_bytes, 6 * kPage));
  EXPECT_EQ(Get(counters_.host_used_bytes), 6 * kPage);
  // A full device (10 pages again); the next touch evicts a written page
  // into the staging: into the reserve, at once (no policy thread runs here
  // to make room).
  const uint64_t spilled = Get(counters_.spilled_pages);
  for (uint32_t p = 10; p < 19; ++p) WritePattern(PageBase(r, p), kPage, Seed(p, 1));
  ASSERT_TRUE(events_.WaitForEvictions(1));
  EXPECT_EQ(Get(counters_.staging_waits), 0u);
  // The drain writes it out: the reserve is free again without a tick.
  EXPECT_TRUE(WaitForCounterAtMost(counters_.host_used_bytes, 6 * kPage));
  EXPECT_EQ(Get(counters_.spilled_pages), spilled + 1);
  // Everything reads back as written.
  for (uint32_t p = 0; p < 19; ++p) {
    EXPECT_EQ(CheckPattern(PageBase(r, p), kPage, Seed(p, 1)), -1) << p;
  }
}

TEST_F(SimDiskTest, FaultsThatStageWrittenPagesNeverWaitForATick) {
  SpillStore* store = MakeStore(64);
  ASSERT_TRUE(store);
  // A staging of 4 pages, 1 of them the reserve; no policy thread runs. A
  // wait that ran out would take 5 s.
  MemfdDeviceConfig config;
  config.host_limit_bytes = 4 * kPage;
  config.staging_wait = std::chrono::seconds(5);
  auto dev = MakeDevice(6 * kPage, 1, false, store, config);
  ASSERT_TRUE(dev);
  constexpr uint32_t kPages = 30;
  Result<RegionPtr> made = dev->CreateRegion(27, kPages * kPage, kPage, "kv-drain");
  ASSERT_TRUE(made.ok());
  Region& r = *made.value();
  // Each first touch past the sixth evicts the oldest written page into the
  // staging: 24 pages through a staging of 4. Nothing but the drain writes
  // them (a fault that found the staging full would wait it out each time).
  for (uint32_t p = 0; p < kPages; ++p) WritePattern(PageBase(r, p), kPage, Seed(p, 1));
  ASSERT_TRUE(events_.WaitForEvictions(kPages - 6));
  const uint64_t waits = Get(counters_.staging_waits);
  EXPECT_LT(Get(counters_.staging_wait_ns), 2'500'000'000) << waits << " waits";
  // Back to the limit less the reserve, every page written once.
  EXPECT_TRUE(WaitForCounterAtMost(counters_.host_used_bytes, 3 * kPage));
  EXPECT_GE(Get(counters_.spilled_pages), kPages - 6 - 3);
  for (uint32_t p = 0; p < kPages; ++p) {
    EXPECT_EQ(CheckPattern(PageBase(r, p), kPage, Seed(p, 1)), -1) << p;
  }
  dev->DestroyRegion(r);
}

TEST_F(SimDiskTest, CopiesWrittenAheadMakeTheNextEvictionFreeUnlessThePageChanged) {
  SpillStore* store = MakeStore(32);
  ASSERT_TRUE(store);
  // The host backend's device: its host tier only stages pages for SSD.
  MemfdDeviceConfig config;
  config.copy_ahead = true;
  config.host_limit_bytes = 4 * kPage;
  auto dev = MakeDevice(8 * kPage, 1, false, store, config);
  ASSERT_TRUE(dev);
  Result<RegionPtr> made = dev->CreateRegion(25, 16 * kPage, kPage, "kv-copies");
  ASSERT_TRUE(made.ok());
  Region& r = *made.value();
  for (uint32_t p = 0; p < 8; ++p) WritePattern(PageBase(r, p), kPage, Seed(p, 1));
  // A full device: the oldest half (pages 0..3, the next to be evicted)
  // gets copies on SSD while nothing else is going on.
  const auto deadline = std::chrono::steady_clock::now() + kEventDeadline;
  while (Get(counters_.copied_ahead_pages) < 4 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();  // a condition: the pipeline thread answers it
  }
  ASSERT_EQ(Get(counters_.copied_ahead_pages), 4u);
  for (uint32_t p = 0; p < 4; ++p) {
    EXPECT_NE(r.pages[p].flags.load() & kPageDiskCopy, 0) << p;
    EXPECT_EQ(TierOf(r, p), Tier::kDevice) << p;
    // Write-protected as the copy was taken (where the kernel can).
    EXPECT_EQ(Unwritten(r, p), Protectable(r)) << p;
  }
  EXPECT_EQ(Get(counters_.disk_copy_bytes), 4 * kPage);
  // Page 1 changes after its copy was written: a write fault says so.
  WritePattern(PageBase(r, 1), kPage, Seed(1, 2));
  EXPECT_EQ(dev->write_faults(), Protectable(r) ? 1u : 0u);
  EXPECT_FALSE(Unwritten(r, 1));
  // Four new pages evict the four oldest: three go to disk unwritten, the
  // changed one to host memory, its stale copy dropped.
  for (uint32_t p = 8; p < 12; ++p) WritePattern(PageBase(r, p), kPage, Seed(p, 1));
  ASSERT_TRUE(events_.WaitForEvictions(4));
  for (uint32_t p : {0u, 2u, 3u}) EXPECT_EQ(TierOf(r, p), Tier::kDisk) << p;
  EXPECT_EQ(TierOf(r, 1), Tier::kHost);
  EXPECT_EQ(r.pages[1].flags.load() & kPageDiskCopy, 0);
  EXPECT_EQ(Get(counters_.spill_clean_pages), 3u);
  EXPECT_EQ(Get(counters_.host_used_bytes), kPage);
  // Everything reads back as last written.
  ASSERT_TRUE(dev->Spill(r, 1).ok());
  for (uint32_t p = 0; p < 4; ++p) {
    EXPECT_EQ(CheckPattern(PageBase(r, p), kPage, Seed(p, p == 1 ? 2 : 1)), -1) << p;
  }
}

}  // namespace
}  // namespace kvtier::testing
