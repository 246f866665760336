// The CUDA backend's disk tier on the fake driver (label cuda, no GPU
// needed). The test plays CUPTI: a "launch" reports its submission to the
// backend (OnSubmitEnter), then reads the pages the kernel would, and fails
// if any byte differs from what the engine wrote (a discarded page reads as
// the fake's poison), then reports the return. Checks: an idle process is
// sealed only when no submission is in flight and after its queued work is
// waited for; sealed or dormant pages are spilled and their memory
// discarded; a launch waits until every byte is back; dormant ranges spill
// without a seal and come back on kvtier_wait or before the next launch
// once woken; pages of zeros are not written; write, discard and read
// errors lose nothing; a page that cannot be read back stops the process;
// and launches racing a spilling policy thread never see a spilled byte.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <numeric>
#include <thread>
#include <vector>

#include "runtime/device/cuda/uvm_device.h"
#include "runtime/runtime.h"
#include "runtime/storage/fault_env.h"
#include "runtime/storage/spill_store.h"
#include "start/bootstrap.h"
#include "storage_test_util.h"
#include "tests/testing/fake_cuda_driver.h"

namespace kvtier::cuda {
namespace {

using storage_test::Pattern;
using storage_test::SmallConfig;
using storage_test::TempDir;

constexpr size_t kPage = size_t{64} << 10;
constexpr uint32_t kPages = 8;
constexpr size_t kGiB = size_t{1} << 30;

class UvmDiskTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(dir_.ok());
    fake::Reset(1, 64 * kGiB);
  }
  void TearDown() override {
    dev_.reset();
    store_.reset();
  }

  void Start(UvmDeviceConfig::Watch watch = UvmDeviceConfig::Watch::kCaller,
             uint32_t disk_pages = 64, bool batch_calls = true, bool encrypt = true) {
    SpillStoreConfig store_config = SmallConfig(dir_.path(), disk_pages, kPage);
    store_config.encrypt = encrypt;
    auto store = SpillStore::Create(store_config, &env_, &counters_);
    ASSERT_TRUE(store.ok()) << store.status().message();
    store_ = std::move(store).value();
    UvmDeviceConfig config;
    config.api = fake::Api(batch_calls);
    config.context = fake::ContextOf(0);
    config.budget.all = 64 * kPage;
    config.page_size = kPage;
    config.counters = &counters_;
    config.use_cupti = false;
    config.maintenance_ms = 100000;  // the tests call CheckIdle themselves
    config.store = store_.get();
    config.idle_ns = 1;  // idle as soon as no submission is in flight
    config.watch = watch;
    auto made = UvmDevice::Create(config);
    ASSERT_TRUE(made.ok()) << made.status().message();
    dev_ = std::move(made).value();
  }

  // A region whose pages hold the engine's bytes (seeded by page) on the host.
  RegionPtr MakeRegion(RegionId id = 1, uint32_t pages = kPages) {
    auto made = dev_->CreateRegion(id, pages * kPage, kPage, "kv");
    EXPECT_TRUE(made.ok()) << made.status().message();
    RegionPtr r = made.value();
    for (uint32_t p = 0; p < pages; ++p) {
      Write(*r, p, Seed(id, p));
      EXPECT_TRUE(dev_->Promote(*r, p).ok());
      EXPECT_TRUE(dev_->Demote(*r, p).ok());
      EXPECT_EQ(TierOf(*r, p), Tier::kHost);
    }
    return r;
  }
  static uint64_t Seed(RegionId id, uint32_t page) { return id * 1000 + page + 1; }
  // The engine's bytes of a page; made once (MakeRegion), read by any thread.
  const std::vector<uint8_t>& Bytes(uint64_t seed) {
    auto it = patterns_.find(seed);
    if (it == patterns_.end()) it = patterns_.emplace(seed, Pattern(kPage, seed)).first;
    return it->second;
  }
  void Write(const Region& r, uint32_t page, uint64_t seed) {
    memcpy(reinterpret_cast<void*>(r.PageAddr(page)), Bytes(seed).data(), kPage);
  }
  bool Holds(const Region& r, uint32_t page, uint64_t seed) const {
    const auto it = patterns_.find(seed);
    return it != patterns_.end() &&
           memcmp(reinterpret_cast<const void*>(r.PageAddr(page)), it->second.data(), kPage) == 0;
  }
  static Tier TierOf(const Region& r, uint32_t page) {
    return r.pages[page].tier.load(std::memory_order_acquire);
  }

  // A kernel launch as CUPTI reports it: the submission, the kernel reading
  // `pages` of `r` (true when every byte is the engine's), the return.
  bool Launch(const Region& r, std::vector<uint32_t> pages) {
    dev_->OnSubmitEnter();
    bool intact = true;
    for (uint32_t p : pages) intact = intact && Holds(r, p, Seed(r.id, p));
    dev_->OnSubmitExit();
    return intact;
  }
  std::vector<Status> SpillAll(Region& r, uint32_t first = 0, uint32_t count = kPages) {
    std::vector<PageRef> refs;
    for (uint32_t p = first; p < first + count; ++p) refs.push_back({&r, p});
    std::vector<Status> results(refs.size());
    dev_->SpillPages(refs, results);
    return results;
  }
  uint64_t Count(const std::atomic<uint64_t>& c) { return Counters::Get(c); }

  std::map<uint64_t, std::vector<uint8_t>> patterns_;
  TempDir dir_;
  FaultEnv env_{Env::Default()};
  Counters counters_;
  std::unique_ptr<SpillStore> store_;
  std::unique_ptr<UvmDevice> dev_;
};

TEST_F(UvmDiskTierTest, AnIdleProcessIsSealedAndALaunchWaitsUntilEveryByteIsBack) {
  Start();
  RegionPtr r = MakeRegion();
  ASSERT_NE(r->spill_gate, nullptr);
  // Before the seal no page may go: the GPU could be reading any of them.
  for (const Status& s : SpillAll(*r)) EXPECT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(TierOf(*r, 0), Tier::kHost);
  EXPECT_TRUE(fake::State().discards.empty());

  dev_->CheckIdle();
  ASSERT_TRUE(dev_->sealed());
  EXPECT_TRUE(r->spill_gate->load());
  EXPECT_EQ(fake::State().ctx_syncs, 1);  // the queued work was waited for
  EXPECT_EQ(Count(counters_.idle_seals), 1u);
  for (const Status& s : SpillAll(*r)) EXPECT_TRUE(s.ok()) << s.message();
  for (uint32_t p = 0; p < kPages; ++p) {
    EXPECT_EQ(TierOf(*r, p), Tier::kDisk);
    EXPECT_FALSE(Holds(*r, p, Seed(r->id, p)));  // discarded: poison
  }
  EXPECT_EQ(fake::State().discards.size(), kPages);
  EXPECT_EQ(Count(counters_.spilled_pages), kPages);
  EXPECT_EQ(Count(counters_.disk_used_bytes), kPages * kPage);
  EXPECT_EQ(Count(counters_.host_used_bytes), 0u);

  EXPECT_TRUE(Launch(*r, {0, 3, 7}));  // every byte back before the "kernel" ran
  EXPECT_FALSE(dev_->sealed());
  for (uint32_t p = 0; p < kPages; ++p) {
    EXPECT_EQ(TierOf(*r, p), Tier::kHost);
    EXPECT_TRUE(Holds(*r, p, Seed(r->id, p))) << p;
  }
  EXPECT_EQ(Count(counters_.gate_stalls), 1u);
  EXPECT_GT(Count(counters_.gate_stall_ns), 0u);
  EXPECT_EQ(Count(counters_.restored_pages), kPages);
  EXPECT_EQ(store_->used_slots(), 0u);
  EXPECT_TRUE(Launch(*r, {1}));  // an open gate: no stall
  EXPECT_EQ(Count(counters_.gate_stalls), 1u);
}

// Encryption is on by default: the spill file's blocks hold none of the
// engine's bytes, and every byte comes back. The control, a store in the
// clear, shows the search finds them where they are.
TEST_F(UvmDiskTierTest, SpilledPagesLeaveNoTraceOfTheirBytesOnDisk) {
  for (const bool encrypt : {true, false}) {
    SCOPED_TRACE(encrypt ? "encrypted" : "in the clear (the control)");
    dev_.reset();  // the last pass's, before its store
    Start(UvmDeviceConfig::Watch::kCaller, 64, true, encrypt);
    ASSERT_EQ(store_->encrypts(), encrypt);
    RegionPtr r = MakeRegion();
    dev_->CheckIdle();
    ASSERT_TRUE(dev_->sealed());
    for (const Status& s : SpillAll(*r)) EXPECT_TRUE(s.ok()) << s.message();
    for (uint32_t p = 0; p < kPages; ++p) {
      ASSERT_EQ(TierOf(*r, p), Tier::kDisk);
      const std::vector<uint8_t>& bytes = Bytes(Seed(r->id, p));
      EXPECT_EQ(storage_test::SpillFileHolds(*store_, bytes.data() + 4096, 64), !encrypt)
          << "page " << p;
    }
    EXPECT_TRUE(Launch(*r, {0, 1, 2, 3, 4, 5, 6, 7}));
    EXPECT_EQ(Count(counters_.checksum_mismatches), 0u);
  }
}

TEST_F(UvmDiskTierTest, NoSealWhileASubmissionIsInFlight) {
  Start();
  RegionPtr r = MakeRegion();
  dev_->OnSubmitEnter();  // an engine thread inside cuLaunchKernel
  dev_->CheckIdle();
  EXPECT_FALSE(dev_->sealed());
  EXPECT_EQ(fake::State().ctx_syncs, 0);
  for (const Status& s : SpillAll(*r)) EXPECT_TRUE(s.ok());
  EXPECT_EQ(TierOf(*r, 0), Tier::kHost);
  dev_->OnSubmitExit();
  dev_->CheckIdle();
  EXPECT_TRUE(dev_->sealed());
  // An exit with no enter (a call begun before the watch started) counts
  // for nothing: the next seal still finds nothing in flight.
  dev_->OnSubmitExit();
  EXPECT_TRUE(Launch(*r, {0}));
  dev_->CheckIdle();
  EXPECT_TRUE(dev_->sealed());
}

TEST_F(UvmDiskTierTest, ASubmissionDuringTheFenceOpensTheGateAndNothingSpills) {
  Start();
  RegionPtr r = MakeRegion();
  bool launched = false;
  // Another engine thread launches while the maintenance thread waits for
  // the queued work: it must find the gate closing and open it.
  fake::State().on_ctx_sync = [&] {
    std::thread engine([&] { launched = Launch(*r, {0}); });
    engine.join();
  };
  dev_->CheckIdle();
  EXPECT_TRUE(launched);
  EXPECT_FALSE(dev_->sealed());
  for (const Status& s : SpillAll(*r)) EXPECT_TRUE(s.ok());
  EXPECT_EQ(TierOf(*r, 0), Tier::kHost);
  EXPECT_TRUE(fake::State().discards.empty());
}

TEST_F(UvmDiskTierTest, DormantRangesSpillWithoutASealAndComeBackOnWait) {
  Start();
  RegionPtr r = MakeRegion();
  ASSERT_TRUE(dev_->SetDormant(*r, 0, 3, true).ok());
  for (const Status& s : SpillAll(*r)) EXPECT_TRUE(s.ok());
  for (uint32_t p = 0; p < kPages; ++p) EXPECT_EQ(TierOf(*r, p), p < 3 ? Tier::kDisk : Tier::kHost);
  // The engine keeps using the rest: its launches do not wait for the
  // dormant pages, which stay on disk.
  EXPECT_TRUE(Launch(*r, {3, 4, 7}));
  EXPECT_EQ(Count(counters_.gate_stalls), 0u);
  EXPECT_EQ(TierOf(*r, 0), Tier::kDisk);
  // kvtier_wait: back, verified, before it returns.
  ASSERT_TRUE(dev_->Restore(*r, 0, 3).ok());
  for (uint32_t p = 0; p < 3; ++p) {
    EXPECT_EQ(TierOf(*r, p), Tier::kHost);
    EXPECT_TRUE(Holds(*r, p, Seed(r->id, p)));
    EXPECT_FALSE(r->pages[p].flags.load() & kPageDormant);
  }
  EXPECT_TRUE(Launch(*r, {0, 1, 2}));
}

TEST_F(UvmDiskTierTest, AWokenSpilledRangeHoldsTheNextLaunchUntilItIsBack) {
  Start();
  RegionPtr r = MakeRegion();
  ASSERT_TRUE(dev_->SetDormant(*r, 2, 2, true).ok());
  SpillAll(*r);
  ASSERT_EQ(TierOf(*r, 2), Tier::kDisk);
  ASSERT_TRUE(dev_->SetDormant(*r, 2, 2, false).ok());  // KVTIER_HINT_WILL_NEED
  EXPECT_EQ(TierOf(*r, 2), Tier::kDisk);                // not yet: the hint does not wait
  EXPECT_TRUE(Launch(*r, {2, 3}));
  EXPECT_EQ(TierOf(*r, 2), Tier::kHost);
  EXPECT_EQ(Count(counters_.gate_stalls), 1u);
  // Woken pages are no longer spill candidates while the process runs.
  SpillAll(*r);
  EXPECT_EQ(TierOf(*r, 2), Tier::kHost);
}

TEST_F(UvmDiskTierTest, WithoutAWatchNothingIsSealedAndWakingRestoresAtOnce) {
  Start(UvmDeviceConfig::Watch::kNone);
  EXPECT_FALSE(dev_->gating());
  RegionPtr r = MakeRegion();
  dev_->CheckIdle();
  EXPECT_FALSE(dev_->sealed());
  ASSERT_TRUE(dev_->SetDormant(*r, 0, 2, true).ok());
  SpillAll(*r);
  EXPECT_EQ(TierOf(*r, 0), Tier::kDisk);
  EXPECT_EQ(TierOf(*r, 2), Tier::kHost);
  ASSERT_TRUE(dev_->SetDormant(*r, 0, 2, false).ok());
  EXPECT_EQ(TierOf(*r, 0), Tier::kHost);
  EXPECT_TRUE(Holds(*r, 0, Seed(r->id, 0)));
  EXPECT_TRUE(Holds(*r, 1, Seed(r->id, 1)));
}

TEST_F(UvmDiskTierTest, PagesOfZerosAreNotWrittenAndComeBackAsZeros) {
  Start();
  RegionPtr r = MakeRegion();
  memset(reinterpret_cast<void*>(r->PageAddr(5)), 0, kPage);
  dev_->CheckIdle();
  SpillAll(*r);
  EXPECT_EQ(Count(counters_.zero_pages_dropped), 1u);
  EXPECT_EQ(store_->used_slots(), kPages - 1);
  EXPECT_EQ(TierOf(*r, 5), Tier::kDisk);
  dev_->OnSubmitEnter();
  const std::vector<uint8_t> zeros(kPage, 0);
  EXPECT_EQ(memcmp(reinterpret_cast<void*>(r->PageAddr(5)), zeros.data(), kPage), 0);
  dev_->OnSubmitExit();
  EXPECT_TRUE(Launch(*r, {0, 4, 6}));
}

TEST_F(UvmDiskTierTest, WriteErrorsAndAFullDiskLoseNothing) {
  Start(UvmDeviceConfig::Watch::kCaller, /*disk_pages=*/3);
  RegionPtr r = MakeRegion();
  dev_->CheckIdle();
  env_.Arm(Fault::kWriteIoError, 2);
  env_.Arm(Fault::kWriteNoSpace, 1, 2);
  const std::vector<Status> results = SpillAll(*r);
  int failed = 0;
  for (uint32_t p = 0; p < kPages; ++p) {
    if (results[p].ok()) continue;
    ++failed;
    EXPECT_EQ(TierOf(*r, p), Tier::kHost) << results[p].message();
    EXPECT_TRUE(Holds(*r, p, Seed(r->id, p)));
  }
  EXPECT_GE(failed, 5);  // three injected, and a disk of three pages
  EXPECT_LE(store_->used_slots(), 3u);
  EXPECT_GE(Count(counters_.spill_errors), 3u);
  EXPECT_TRUE(Launch(*r, {0, 1, 2, 3, 4, 5, 6, 7}));  // every byte, wherever it was
}

TEST_F(UvmDiskTierTest, ADiscardTheDriverRefusesKeepsThePagesInMemory) {
  Start();
  RegionPtr r = MakeRegion();
  dev_->CheckIdle();
  fake::State().failing = "cuMemDiscardBatchAsync";
  const std::vector<Status> results = SpillAll(*r, 0, 4);
  for (const Status& s : results) {
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("discarding"), std::string::npos) << s.message();
  }
  EXPECT_EQ(TierOf(*r, 0), Tier::kHost);
  EXPECT_EQ(store_->used_slots(), 0u);  // the written copies were given back
  EXPECT_TRUE(Launch(*r, {0, 1, 2, 3}));
}

TEST_F(UvmDiskTierTest, AReadErrorIsRetriedAndACorruptPageStopsTheProcess) {
  Start();
  RegionPtr r = MakeRegion();
  dev_->CheckIdle();
  SpillAll(*r);
  env_.Arm(Fault::kReadIoError, 1);  // once: the store's retry reads it
  EXPECT_TRUE(Launch(*r, {0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_GE(Count(counters_.restore_errors), 1u);

  dev_->CheckIdle();
  ASSERT_TRUE(dev_->sealed());
  SpillAll(*r, 0, 1);
  env_.Arm(Fault::kReadBitFlip, -1);  // every read comes back wrong
  EXPECT_DEATH(Launch(*r, {0}), "cannot be restored");
}

TEST_F(UvmDiskTierTest, ARestoreOfManyChunksBringsEveryPageBackOnWaitAndAtTheGate) {
  // A restore reads runs of consecutive slots (up to 128 KiB), at most a
  // window of them queued (at least 32 pages and 8 MiB: 128 pages of 64
  // KiB); 600 pages take several windows.
  constexpr uint32_t kMany = 600;
  Start(UvmDeviceConfig::Watch::kCaller, kMany);
  RegionPtr r = MakeRegion(1, kMany);
  std::vector<uint32_t> all(kMany);
  std::iota(all.begin(), all.end(), 0u);
  const auto spill_all = [&] {
    for (const Status& s : SpillAll(*r, 0, kMany)) ASSERT_TRUE(s.ok()) << s.message();
    for (uint32_t p = 0; p < kMany; ++p) ASSERT_EQ(TierOf(*r, p), Tier::kDisk) << "page " << p;
  };
  const auto pages_back = [&] {
    uint32_t back = 0;
    for (uint32_t p = 0; p < kMany; ++p) {
      back += TierOf(*r, p) == Tier::kHost && Holds(*r, p, Seed(r->id, p));
    }
    return back;
  };
  // kvtier_wait of dormant pages.
  ASSERT_TRUE(dev_->SetDormant(*r, 0, kMany, true).ok());
  spill_all();
  ASSERT_TRUE(dev_->Restore(*r, 0, kMany).ok());
  EXPECT_EQ(pages_back(), kMany);
  // The first launch after an idle seal.
  dev_->CheckIdle();
  ASSERT_TRUE(dev_->sealed());
  spill_all();
  EXPECT_TRUE(Launch(*r, all));
  EXPECT_EQ(pages_back(), kMany);
  EXPECT_EQ(Count(counters_.restored_pages), 2u * kMany);
}

TEST_F(UvmDiskTierTest, APromoteOfASpilledPageRestoresItFirst) {
  Start();
  RegionPtr r = MakeRegion();
  ASSERT_TRUE(dev_->SetDormant(*r, 4, 1, true).ok());
  SpillAll(*r, 4, 1);
  ASSERT_EQ(TierOf(*r, 4), Tier::kDisk);
  ASSERT_TRUE(dev_->Promote(*r, 4).ok());
  EXPECT_EQ(TierOf(*r, 4), Tier::kDevice);
  EXPECT_TRUE(Holds(*r, 4, Seed(r->id, 4)));
  EXPECT_EQ(fake::State().prefetches.back().device, 0);
}

TEST_F(UvmDiskTierTest, ARestoreMapsDiscardedPagesOnTheHostBeforeCopyingIntoThem) {
  // A CPU copy into discarded managed memory faults it in 4 KiB at a time
  // through the driver; one prefetch to the host maps it first.
  Start();
  RegionPtr r = MakeRegion();
  memset(reinterpret_cast<void*>(r->PageAddr(5)), 0, kPage);  // a page of zeros: not written
  ASSERT_TRUE(dev_->SetDormant(*r, 3, 3, true).ok());
  SpillAll(*r, 3, 3);
  fake::State().prefetches.clear();
  ASSERT_TRUE(dev_->Restore(*r, 3, 3).ok());
  for (uint32_t p = 3; p < 6; ++p) {
    const auto& list = fake::State().prefetches;
    // A run of pages read together is mapped in one range.
    const auto it = std::find_if(list.begin(), list.end(), [&](const fake::Prefetch& f) {
      return f.ptr <= r->PageAddr(p) && r->PageAddr(p) + kPage <= f.ptr + f.bytes;
    });
    ASSERT_NE(it, list.end()) << "page " << p << " was not prefetched";
    EXPECT_EQ(it->device, -1) << "page " << p;
    EXPECT_TRUE(it->discarded) << "page " << p << " was copied into before its prefetch";
    EXPECT_EQ(TierOf(*r, p), Tier::kHost);
  }
  EXPECT_TRUE(Holds(*r, 3, Seed(r->id, 3)));
  EXPECT_TRUE(Holds(*r, 4, Seed(r->id, 4)));
  // A prefetch the driver refuses costs the copies speed, not bytes.
  ASSERT_TRUE(dev_->SetDormant(*r, 3, 2, true).ok());
  SpillAll(*r, 3, 2);
  fake::State().failing = "cuMemPrefetchAsync";
  ASSERT_TRUE(dev_->Restore(*r, 3, 2).ok());
  fake::State().failing.clear();
  EXPECT_TRUE(Holds(*r, 3, Seed(r->id, 3)));
  EXPECT_TRUE(Holds(*r, 4, Seed(r->id, 4)));
}

TEST_F(UvmDiskTierTest, TheReadBuffersTheFirstRestoreTakesAreMadeOnceAPageIsOnDisk) {
  // Filling new memory is not free: the first returning session takes
  // buffers the maintenance pass made once a page went to disk (not the
  // spill, which the policy times), and makes none.
  Start();
  RegionPtr r = MakeRegion();
  dev_->Maintain();
  EXPECT_EQ(dev_->restore_buffers_kept(), 0u) << "made before anything was on disk";
  memset(reinterpret_cast<void*>(r->PageAddr(0)), 0, kPage);  // zeros: nothing written
  ASSERT_TRUE(dev_->SetDormant(*r, 0, kPages, true).ok());
  SpillAll(*r, 0, 1);
  dev_->Maintain();
  EXPECT_EQ(dev_->restore_buffers_kept(), 0u) << "a spill that wrote nothing made buffers";
  // A write the disk refuses stores nothing either.
  env_.SetClock(1'000'000'000);  // the store's backoff runs on a clock the test advances
  env_.Arm(Fault::kWriteIoError, 1);
  ASSERT_FALSE(SpillAll(*r, 1, 1)[0].ok());
  dev_->Maintain();
  EXPECT_EQ(dev_->restore_buffers_kept(), 0u) << "a spill that failed made buffers";
  env_.AdvanceClock(1'000'000'000);
  SpillAll(*r, 1, kPages - 1);
  EXPECT_EQ(dev_->restore_buffers_kept(), 0u) << "the spill made them on its own time";
  dev_->Maintain();
  const size_t made = dev_->restore_buffers_kept();
  EXPECT_GE(made, 64u) << "a window of 128 KiB runs in flight (8 MiB)";
  ASSERT_TRUE(dev_->Restore(*r, 0, kPages).ok());
  EXPECT_EQ(dev_->restore_buffers_kept(), made) << "the restore made buffers of its own";
  for (uint32_t p = 1; p < kPages; ++p) EXPECT_TRUE(Holds(*r, p, Seed(r->id, p))) << p;
  // Later spills make no more.
  ASSERT_TRUE(dev_->SetDormant(*r, 0, kPages, true).ok());
  SpillAll(*r);
  dev_->Maintain();
  EXPECT_EQ(dev_->restore_buffers_kept(), made);
}

TEST_F(UvmDiskTierTest, DestroyingARegionGivesItsSlotsBackAndOpensTheGate) {
  Start();
  RegionPtr r = MakeRegion();
  dev_->CheckIdle();
  SpillAll(*r);
  ASSERT_EQ(store_->used_slots(), kPages);
  dev_->DestroyRegion(*r);
  EXPECT_EQ(store_->used_slots(), 0u);
  EXPECT_EQ(Count(counters_.disk_used_bytes), 0u);
  dev_->OnSubmitEnter();  // nothing left to bring back
  dev_->OnSubmitExit();
  EXPECT_EQ(Count(counters_.gate_stalls), 0u);
}

TEST_F(UvmDiskTierTest, ADriverWithoutTheDiscardCallHasNoDiskTier) {
  Start(UvmDeviceConfig::Watch::kCaller, 64, /*batch_calls=*/false);
  EXPECT_FALSE(dev_->has_disk_tier());
  RegionPtr r = MakeRegion();
  EXPECT_EQ(r->spill_gate, nullptr);
  ASSERT_TRUE(dev_->SetDormant(*r, 0, 1, true).ok());
  const std::vector<Status> results = SpillAll(*r, 0, 1);
  EXPECT_FALSE(results[0].ok());
  EXPECT_EQ(TierOf(*r, 0), Tier::kHost);
}

// The whole path through the runtime: KVTIER_DISK_BUDGET makes the store,
// the runtime hands it to the CUDA backend, a dormant hint demotes the
// range (the policy's cold pages go first) and spills it once the host tier
// is over its budget, and kvtier_wait brings every byte back.
TEST_F(UvmDiskTierTest, ThroughTheRuntimeADormantRangeGoesToDiskAndWaitBringsItBack) {
  const std::map<std::string, std::string> values = {
      {"KVTIER_DEVICE_BUDGET", "1M"},   {"KVTIER_HOST_BUDGET", "512K"},
      {"KVTIER_DISK_BUDGET", "16M"},    {"KVTIER_PAGE_SIZE", "64K"},
      {"KVTIER_DISK_DIR", dir_.path()}, {"KVTIER_STATS", "0"},
      {"KVTIER_IDLE_MS", "0"}};
  Result<Options> options = ParseOptions([&](const char* name) -> const char* {
    auto it = values.find(name);
    return it == values.end() ? nullptr : it->second.c_str();
  });
  ASSERT_TRUE(options.ok()) << options.status().message();
  UvmDevice* cuda = nullptr;
  Runtime::Parts parts = SimParts();
  parts.start_threads = false;
  parts.device = [&](const Runtime::DeviceContext& ctx) -> Result<std::unique_ptr<Device>> {
    SpillStore* store = ctx.open_store();
    EXPECT_NE(store, nullptr) << "KVTIER_DISK_BUDGET gives the backend a store";
    UvmDeviceConfig config;
    config.api = fake::Api();
    config.context = fake::ContextOf(0);
    config.budget = options.value().device_budget;
    config.page_size = options.value().page_size;
    config.events = ctx.events;
    config.counters = ctx.counters;
    config.use_cupti = false;
    config.maintenance_ms = 100000;
    config.store = store;
    config.watch = UvmDeviceConfig::Watch::kCaller;
    auto made = UvmDevice::Create(config);
    if (!made.ok()) return made.status();
    cuda = made.value().get();
    return std::unique_ptr<Device>(std::move(made).value());
  };
  auto made = Runtime::Create(options.value(), std::move(parts));
  ASSERT_TRUE(made.ok()) << made.status().message();
  Runtime& rt = *made.value();
  EXPECT_TRUE(rt.device().has_disk_tier());
  Result<void*> base = rt.CreateRegion(kPages * kPage, nullptr);
  ASSERT_TRUE(base.ok()) << base.status().message();
  RegionPtr r = rt.regions().Find(reinterpret_cast<uintptr_t>(base.value()));
  for (uint32_t p = 0; p < kPages; ++p) {
    Write(*r, p, Seed(r->id, p));
    ASSERT_TRUE(cuda->Promote(*r, p).ok());  // the engine's kernels wrote them on the GPU
  }
  ASSERT_TRUE(rt.Dormant(base.value(), kPages * kPage).ok());
  for (int t = 0; t < 20 && TierOf(*r, kPages - 1) != Tier::kDisk; ++t) rt.Tick();
  uint32_t on_disk = 0;
  for (uint32_t p = 0; p < kPages; ++p) on_disk += TierOf(*r, p) == Tier::kDisk;
  EXPECT_GE(on_disk, 2u) << "a host tier of 8 pages keeps at most 7 (its high watermark)";
  EXPECT_GT(Counters::Get(rt.counters().spilled_pages), 0u);

  ASSERT_TRUE(rt.Wait(base.value(), kPages * kPage).ok());
  for (uint32_t p = 0; p < kPages; ++p) {
    EXPECT_NE(TierOf(*r, p), Tier::kDisk) << p;
    EXPECT_TRUE(Holds(*r, p, Seed(r->id, p))) << p;
    EXPECT_FALSE(r->pages[p].flags.load() & kPageDormant) << p;
  }
  cuda->OnSubmitEnter();  // the engine's next kernel: nothing left to wait for
  cuda->OnSubmitExit();
  EXPECT_EQ(Counters::Get(rt.counters().gate_stalls), 0u);
  EXPECT_TRUE(rt.FreeRegion(base.value()));
}

// Engine threads launch while the policy thread seals, spills and the gate
// reopens, over and over: no launch may ever read a spilled (poisoned)
// byte. Each engine launches once per policy round, at whatever point of
// the round it gets to run, so seals, spills, fences and openings overlap
// launches in every order.
TEST_F(UvmDiskTierTest, LaunchesRacingASpillingPolicyNeverSeeASpilledByte) {
  Start();
  RegionPtr r = MakeRegion(1, 4);
  std::atomic<bool> stop{false};
  std::atomic<int> bad{0}, launches{0}, rounds{0};
  std::vector<std::thread> engines;
  for (int t = 0; t < 2; ++t) {
    engines.emplace_back([&] {
      while (!stop.load()) {
        if (!Launch(*r, {0, 1, 2, 3})) bad.fetch_add(1);
        // The next launch comes 1 to 8 rounds later: some land in the middle
        // of a seal, a fence or a spill, some after it.
        const int n = launches.fetch_add(1);
        const int until = rounds.load() + 1 + n % 8;
        while (!stop.load() && rounds.load() < until) std::this_thread::yield();
      }
    });
  }
  int spilled_rounds = 0;
  for (int round = 0; round < 5000000 && (launches.load() < 3000 || spilled_rounds < 400);
       ++round) {
    dev_->CheckIdle();
    const std::vector<Status> results = SpillAll(*r, 0, 4);
    for (const Status& s : results) ASSERT_TRUE(s.ok()) << s.message();
    if (fake::State().discards.size() > static_cast<size_t>(spilled_rounds)) {
      spilled_rounds = static_cast<int>(fake::State().discards.size());
    }
    rounds.fetch_add(1);
  }
  stop.store(true);
  for (std::thread& t : engines) t.join();
  EXPECT_EQ(bad.load(), 0) << "of " << launches.load() << " launches";
  EXPECT_GT(spilled_rounds, 0) << "no page was ever spilled: the race was not exercised";
  EXPECT_GT(Count(counters_.gate_stalls), 0u);
  EXPECT_TRUE(Launch(*r, {0, 1, 2, 3}));
}

}  // namespace
}  // namespace kvtier::cuda
