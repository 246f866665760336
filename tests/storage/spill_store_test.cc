// Tests of SpillStore without faults: round trips (sync and batched, aligned
// and unaligned buffers, short pages), the free list, the budget, the
// invisible spill file, the I/O fallbacks on tmpfs, and concurrent callers.
#include "runtime/storage/spill_store.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstring>
#include <string>
#include <thread>

#include "runtime/storage/fault_env.h"
#include "runtime/storage/page_io.h"
#include "runtime/storage/spill_batch.h"
#include "storage_test_util.h"

namespace kvtier {
namespace {

using storage_test::kTestPage;
using storage_test::Pattern;
using storage_test::SmallConfig;
using storage_test::TempDir;

bool KnownMode(const std::string& mode) {
  return mode == "io_uring+direct" || mode == "io_uring" || mode == "pread+direct" ||
         mode == "pread";
}

std::unique_ptr<SpillStore> MakeStore(const SpillStoreConfig& c, Counters* counters,
                                      Env* env = nullptr) {
  Result<std::unique_ptr<SpillStore>> s = SpillStore::Create(c, env, counters);
  EXPECT_TRUE(s.ok()) << s.status().message();
  return s.ok() ? std::move(s).value() : nullptr;
}

// Spills `pages` pages of mixed shapes (aligned, unaligned, short) through
// the synchronous API and checks each comes back exactly.
void SyncRoundTrip(SpillStore* store, int pages) {
  size_t page = store->page_size();
  std::vector<SpillSlot> slots;
  std::vector<size_t> lens;
  std::vector<uint8_t> raw(page + 64);
  for (int i = 0; i < pages; ++i) {
    size_t len = i % 5 == 4 ? page - 100 * (i % 7 + 1) : page;  // some short last pages
    std::vector<uint8_t> data = Pattern(len, i);
    uint8_t* src = raw.data() + (i % 3 == 0 ? 1 : 0);  // some unaligned sources
    memcpy(src, data.data(), len);
    Result<SpillSlot> s = store->Write(src, len);
    ASSERT_TRUE(s.ok()) << "page " << i << ": " << s.status().message();
    slots.push_back(s.value());
    lens.push_back(len);
  }
  std::vector<uint8_t> back(page + 64);
  for (int i = 0; i < pages; ++i) {
    uint8_t* dst = back.data() + (i % 2);
    ReadFailure why = ReadFailure::kIoError;
    Status st = store->Read(slots[i].index, dst, lens[i], slots[i].checksum, &why);
    ASSERT_TRUE(st.ok()) << "page " << i << ": " << st.message();
    EXPECT_EQ(why, ReadFailure::kNone);
    std::vector<uint8_t> want = Pattern(lens[i], i);
    ASSERT_EQ(memcmp(dst, want.data(), lens[i]), 0) << "page " << i;
  }
}

TEST(SpillStoreTest, RoundTripManyPagesWithChecksums) {
  TempDir tmp;
  ASSERT_TRUE(tmp.ok());
  Counters c;
  auto store = MakeStore(SmallConfig(tmp.path(), 256), &c);
  ASSERT_NE(store, nullptr);
  std::printf("io mode on %s: %s\n", tmp.path().c_str(), store->io_mode());
  EXPECT_TRUE(KnownMode(store->io_mode())) << store->io_mode();
  SyncRoundTrip(store.get(), 200);
  EXPECT_EQ(Counters::Get(c.spilled_pages), 200u);
  EXPECT_EQ(Counters::Get(c.restored_pages), 200u);
  EXPECT_EQ(Counters::Get(c.disk_used_bytes), 200 * kTestPage);
  EXPECT_EQ(Counters::Get(c.disk_budget_bytes), 256 * kTestPage);
  EXPECT_EQ(Counters::Get(c.spill_errors) + Counters::Get(c.restore_errors) +
                Counters::Get(c.checksum_mismatches),
            0u);
  EXPECT_EQ(store->used_slots(), 200u);
}

// Without encryption the checksum is what a read verifies (with it, the tag:
// page_cipher_test.cc).
TEST(SpillStoreTest, ChecksumIsOfTheBytesWritten) {
  TempDir tmp;
  ASSERT_TRUE(tmp.ok());
  SpillStoreConfig clear = SmallConfig(tmp.path(), 4);
  clear.encrypt = false;
  auto store = MakeStore(clear, nullptr);
  ASSERT_NE(store, nullptr);
  std::vector<uint8_t> a = Pattern(kTestPage, 1);
  Result<SpillSlot> s = store->Write(a.data(), a.size());
  ASSERT_TRUE(s.ok());
  std::vector<uint8_t> back(kTestPage);
  ReadFailure why;
  Status st = store->Read(s.value().index, back.data(), back.size(), s.value().checksum ^ 1, &why);
  EXPECT_FALSE(st.ok()) << "a wrong expected checksum must not verify";
  EXPECT_EQ(why, ReadFailure::kCorruption);
}

TEST(SpillStoreTest, BatchRoundTripZeroCopyAndBounce) {
  TempDir tmp;
  ASSERT_TRUE(tmp.ok());
  // Every mix of direct and bounced writes and reads, sealed by each cipher:
  // intel-ipsec-mb's by the I/O thread in groups of 256 KiB, OpenSSL's in
  // groups spread over the helpers (SpillBatch::SealGroup).
  for (int mode = 0; mode < 8; ++mode) {
    bool zero_copy_writes = (mode & 1) != 0, zero_copy_reads = (mode & 2) != 0;
    const CipherLib lib = (mode & 4) != 0 ? CipherLib::kOpenSsl : CipherLib::kAuto;
    SCOPED_TRACE(std::string(zero_copy_writes ? "zero-copy" : "bounced") + " writes, " +
                 (zero_copy_reads ? "zero-copy" : "bounced") + " reads, cipher " +
                 (lib == CipherLib::kAuto ? "auto" : "openssl"));
    Counters c;
    SpillStoreConfig cfg = SmallConfig(tmp.path(), 64);
    cfg.zero_copy_writes = zero_copy_writes;
    cfg.zero_copy_reads = zero_copy_reads;
    cfg.cipher = lib;
    auto store = MakeStore(cfg, &c);
    ASSERT_NE(store, nullptr);
    ASSERT_EQ(store->cipher()->lib(), lib == CipherLib::kAuto && PageCipher::IpsecMbRuns()
                                          ? CipherLib::kIpsecMb
                                          : CipherLib::kOpenSsl);
    constexpr int kPages = 48;
    Result<AlignedBuffer> src = AlignedBuffer::Allocate(kPages * kTestPage);
    Result<AlignedBuffer> dst = AlignedBuffer::Allocate(kPages * kTestPage);
    ASSERT_TRUE(src.ok() && dst.ok());
    std::vector<uint8_t> data = Pattern(kPages * kTestPage, 9);
    memcpy(src.value().data(), data.data(), data.size());
    Result<std::unique_ptr<SpillBatch>> batch = store->NewBatch();
    ASSERT_TRUE(batch.ok()) << batch.status().message();
    SpillBatch& b = *batch.value();
    for (int i = 0; i < kPages; ++i) b.AddWrite(src.value().data() + i * kTestPage, kTestPage, i);
    b.Submit();
    std::vector<SpillCompletion> done;
    ASSERT_TRUE(b.WaitAll(&done).ok());
    ASSERT_EQ(done.size(), size_t(kPages));
    std::vector<SpillSlot> slots(kPages);
    for (const SpillCompletion& d : done) {
      ASSERT_TRUE(d.status.ok()) << d.status.message();
      slots[d.tag] = d.slot;
    }
    for (int i = 0; i < kPages; ++i) {
      b.AddRead(slots[i].index, dst.value().data() + i * kTestPage, kTestPage, slots[i].checksum,
                i);
    }
    done.clear();
    ASSERT_TRUE(b.Wait(1, &done).ok());  // at least one, maybe more
    ASSERT_TRUE(b.WaitAll(&done).ok());
    ASSERT_EQ(done.size(), size_t(kPages));
    for (const SpillCompletion& d : done) EXPECT_TRUE(d.status.ok()) << d.status.message();
    EXPECT_EQ(memcmp(dst.value().data(), data.data(), data.size()), 0);
    EXPECT_EQ(Counters::Get(c.restored_bytes), kPages * kTestPage);
    EXPECT_EQ(b.outstanding(), 0u);
  }
}

TEST(SpillStoreTest, FreedSlotsAreReused) {
  TempDir tmp;
  ASSERT_TRUE(tmp.ok());
  Counters c;
  auto store = MakeStore(SmallConfig(tmp.path(), 16), &c);
  ASSERT_NE(store, nullptr);
  std::vector<uint8_t> p = Pattern(kTestPage, 3);
  std::vector<uint32_t> slots;
  for (int i = 0; i < 3; ++i) {
    Result<SpillSlot> s = store->Write(p.data(), p.size());
    ASSERT_TRUE(s.ok());
    slots.push_back(s.value().index);
  }
  EXPECT_EQ(slots, (std::vector<uint32_t>{0, 1, 2}));
  store->Free(slots[1]);
  EXPECT_EQ(store->used_slots(), 2u);
  EXPECT_EQ(Counters::Get(c.disk_used_bytes), 2 * kTestPage);
  store->Free(slots[1]);  // double free: ignored, not counted twice
  EXPECT_EQ(store->used_slots(), 2u);
  EXPECT_EQ(Counters::Get(c.disk_used_bytes), 2 * kTestPage);

  std::vector<uint8_t> q = Pattern(kTestPage, 4);
  Result<SpillSlot> again = store->Write(q.data(), q.size());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again.value().index, slots[1]);
  std::vector<uint8_t> back(kTestPage);
  ASSERT_TRUE(
      store->Read(again.value().index, back.data(), back.size(), again.value().checksum).ok());
  EXPECT_EQ(back, q);

  ReadFailure why;
  store->Free(slots[0]);
  Status st = store->Read(slots[0], back.data(), back.size(), 0, &why);
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(why, ReadFailure::kBadRequest) << st.message();
}

TEST(SpillStoreTest, SlotsAreHandedOutNextFitSoPagesWrittenTogetherSitTogether) {
  TempDir tmp;
  ASSERT_TRUE(tmp.ok());
  Counters c;
  auto store = MakeStore(SmallConfig(tmp.path(), 16), &c);
  ASSERT_NE(store, nullptr);
  std::vector<uint8_t> p = Pattern(kTestPage, 6);
  auto write = [&] {
    Result<SpillSlot> s = store->Write(p.data(), p.size());
    EXPECT_TRUE(s.ok()) << s.status().message();
    return s.ok() ? s.value().index : ~0u;
  };
  for (uint32_t i = 0; i < 8; ++i) EXPECT_EQ(write(), i);
  // Holes behind the cursor: while more than a quarter of the file is free
  // the cursor wraps and fills them in order; a freed slot is not taken
  // back at once (LIFO would scatter a run of pages written together).
  for (uint32_t i : {1u, 2u, 3u, 5u}) store->Free(i);
  EXPECT_EQ(write(), 1u);
  EXPECT_EQ(write(), 2u);
  store->Free(0);
  EXPECT_EQ(write(), 3u) << "the cursor moves on past the slot just freed";
  EXPECT_EQ(write(), 5u);
  // Two free slots of eight (0 and 7 past the end is none): a quarter, so
  // the file grows rather than the cursor going back for slot 0.
  EXPECT_EQ(write(), 8u);
  EXPECT_EQ(store->used_slots(), 8u);
}

TEST(SpillStoreTest, SpareCopiesAreAccountedApartFromOnlyCopies) {
  TempDir tmp;
  ASSERT_TRUE(tmp.ok());
  Counters c;
  auto store = MakeStore(SmallConfig(tmp.path(), 8), &c);
  ASSERT_NE(store, nullptr);
  std::vector<uint8_t> p = Pattern(kTestPage, 7);
  std::vector<uint32_t> slots;
  for (int i = 0; i < 3; ++i) {
    Result<SpillSlot> s = store->Write(p.data(), p.size());
    ASSERT_TRUE(s.ok());
    slots.push_back(s.value().index);
  }
  EXPECT_EQ(Counters::Get(c.disk_used_bytes), 3 * kTestPage);
  store->KeepAsCopy(slots[0]);
  store->KeepAsCopy(slots[1]);
  store->KeepAsCopy(slots[1]);  // twice: counted once
  EXPECT_EQ(store->used_slots(), 3u);
  EXPECT_EQ(store->copy_slots(), 2u);
  EXPECT_EQ(Counters::Get(c.disk_used_bytes), kTestPage);
  EXPECT_EQ(Counters::Get(c.disk_copy_bytes), 2 * kTestPage);
  store->Reuse(slots[0]);  // the page left memory again, unwritten
  store->Reuse(slots[2]);  // not a copy: nothing changes
  EXPECT_EQ(store->copy_slots(), 1u);
  EXPECT_EQ(Counters::Get(c.disk_used_bytes), 2 * kTestPage);
  EXPECT_EQ(Counters::Get(c.disk_copy_bytes), kTestPage);
  store->Free(slots[1]);  // a copy freed comes off the copies
  store->Free(slots[2]);
  EXPECT_EQ(store->used_slots(), 1u);
  EXPECT_EQ(store->copy_slots(), 0u);
  EXPECT_EQ(Counters::Get(c.disk_used_bytes), kTestPage);
  EXPECT_EQ(Counters::Get(c.disk_copy_bytes), 0u);
  // A copy's slot holds the page: it reads back.
  std::vector<uint8_t> back(kTestPage);
  Result<SpillSlot> again = store->Write(p.data(), p.size());
  ASSERT_TRUE(again.ok());
  store->KeepAsCopy(again.value().index);
  ASSERT_TRUE(
      store->Read(again.value().index, back.data(), back.size(), again.value().checksum).ok());
  EXPECT_EQ(back, p);
}

class SpillStoreRunTest : public ::testing::TestWithParam<bool> {};

TEST_P(SpillStoreRunTest, ARunOfSlotsIsOneReadVerifiedPageByPage) {
  TempDir tmp;
  ASSERT_TRUE(tmp.ok());
  Counters c;
  FaultEnv env(Env::Default());
  SpillStoreConfig cfg = SmallConfig(tmp.path(), 8);
  cfg.encrypt = GetParam();
  auto store = MakeStore(cfg, &c, &env);
  ASSERT_NE(store, nullptr);
  std::vector<uint64_t> sums;
  for (int i = 0; i < 3; ++i) {
    std::vector<uint8_t> p = Pattern(kTestPage, 10 + i);
    // Pages 0..2 of no region: a run reads slot k as page k.
    Result<SpillSlot> s = store->Write(p.data(), p.size(), {0, static_cast<uint32_t>(i)});
    ASSERT_TRUE(s.ok());
    ASSERT_EQ(s.value().index, static_cast<uint32_t>(i));
    sums.push_back(s.value().checksum);
  }
  Result<std::unique_ptr<SpillBatch>> batch = store->NewBatch();
  ASSERT_TRUE(batch.ok());
  Result<AlignedBuffer> buf = AlignedBuffer::Allocate(3 * kTestPage);
  ASSERT_TRUE(buf.ok());
  uint8_t* dst = buf.value().data();
  const uint64_t reads = env.requests(IoKind::kRead);
  const uint64_t read_bytes = env.request_bytes(IoKind::kRead);
  batch.value()->AddReadRun(0, 3, dst, sums.data(), 42);
  std::vector<SpillCompletion> done;
  ASSERT_TRUE(batch.value()->WaitAll(&done).ok());
  ASSERT_EQ(done.size(), 1u);
  EXPECT_TRUE(done[0].status.ok()) << done[0].status.message();
  EXPECT_EQ(done[0].tag, 42u);
  EXPECT_EQ(env.requests(IoKind::kRead) - reads, 1u) << "three slots, one read";
  EXPECT_EQ(env.request_bytes(IoKind::kRead) - read_bytes, 3 * kTestPage);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(memcmp(dst + i * kTestPage, Pattern(kTestPage, 10 + i).data(), kTestPage), 0) << i;
  }
  EXPECT_EQ(Counters::Get(c.restored_pages), 3u);

  // The middle page changed on disk: it fails its tag (or checksum), the
  // run is read again, then fails naming that slot, and the destination is
  // zeroed.
  std::vector<uint8_t> byte = storage_test::PeekSpillFile(*store, kTestPage + 100, 1);
  ASSERT_EQ(byte.size(), 1u);
  byte[0] ^= 0x10;
  ASSERT_TRUE(storage_test::PokeSpillFile(*store, kTestPage + 100, byte.data(), 1));
  done.clear();
  batch.value()->AddReadRun(0, 3, dst, sums.data(), 43);
  ASSERT_TRUE(batch.value()->WaitAll(&done).ok());
  ASSERT_EQ(done.size(), 1u);
  EXPECT_FALSE(done[0].status.ok());
  EXPECT_EQ(done[0].failure, ReadFailure::kCorruption);
  EXPECT_NE(done[0].status.message().find("of slot 1"), std::string::npos)
      << done[0].status.message();
  EXPECT_NE(done[0].status.message().find("spill slots 0..2"), std::string::npos)
      << done[0].status.message();
  EXPECT_EQ(Counters::Get(c.checksum_mismatches), 2u) << "the read and its retry";
  EXPECT_TRUE(IsAllZero(dst, 3 * kTestPage)) << "no bad bytes left where the caller looks";

  // A run over a slot not in use is refused before any I/O.
  store->Free(2);
  done.clear();
  batch.value()->AddReadRun(0, 3, dst, sums.data(), 44);
  ASSERT_TRUE(batch.value()->WaitAll(&done).ok());
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].failure, ReadFailure::kBadRequest) << done[0].status.message();
}

INSTANTIATE_TEST_SUITE_P(SealedAndClear, SpillStoreRunTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Sealed" : "Clear";
                         });

TEST(SpillStoreTest, BudgetFullFailsCleanly) {
  TempDir tmp;
  ASSERT_TRUE(tmp.ok());
  Counters c;
  auto store = MakeStore(SmallConfig(tmp.path(), 4), &c);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->capacity_slots(), 4u);
  std::vector<uint8_t> p = Pattern(kTestPage, 5);
  std::vector<SpillSlot> slots;
  for (int i = 0; i < 4; ++i) {
    Result<SpillSlot> s = store->Write(p.data(), p.size());
    ASSERT_TRUE(s.ok());
    slots.push_back(s.value());
  }
  Result<SpillSlot> full = store->Write(p.data(), p.size());
  ASSERT_FALSE(full.ok());
  EXPECT_NE(full.status().message().find("full"), std::string::npos) << full.status().message();
  EXPECT_EQ(Counters::Get(c.spill_errors), 0u) << "a full budget is not an I/O error";
  EXPECT_EQ(Counters::Get(c.disk_degraded), 0u);
  EXPECT_TRUE(store->writable());
  store->Free(slots[2].index);
  Result<SpillSlot> s = store->Write(p.data(), p.size());
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s.value().index, slots[2].index);
}

TEST(SpillStoreTest, RejectsBadLengthsAndConfigs) {
  TempDir tmp;
  ASSERT_TRUE(tmp.ok());
  auto store = MakeStore(SmallConfig(tmp.path(), 4), nullptr);
  ASSERT_NE(store, nullptr);
  std::vector<uint8_t> p(kTestPage + 1);
  EXPECT_FALSE(store->Write(p.data(), 0).ok());
  EXPECT_FALSE(store->Write(p.data(), kTestPage + 1).ok());
  EXPECT_EQ(store->used_slots(), 0u);

  SpillStoreConfig small = SmallConfig(tmp.path(), 1);
  small.budget_bytes = kTestPage - 1;
  Result<std::unique_ptr<SpillStore>> s = SpillStore::Create(small, nullptr, nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("KVTIER_DISK_BUDGET"), std::string::npos)
      << s.status().message();
  SpillStoreConfig odd = SmallConfig(tmp.path(), 4, 3 * 4096);
  EXPECT_FALSE(SpillStore::Create(odd, nullptr, nullptr).ok());
}

TEST(SpillStoreTest, DirectoryIsCreated0700AndSpillFileIsInvisible) {
  TempDir tmp;
  ASSERT_TRUE(tmp.ok());
  for (bool refuse_tmpfile : {false, true}) {
    SCOPED_TRACE(refuse_tmpfile ? "open+unlink" : "O_TMPFILE");
    std::string dir = tmp.path() + (refuse_tmpfile ? "/named" : "/tmpfile");
    FaultEnv env(Env::Default());
    env.RefuseTmpfile(refuse_tmpfile);
    auto store = MakeStore(SmallConfig(dir, 8), nullptr, &env);
    ASSERT_NE(store, nullptr);
    struct stat st;
    ASSERT_EQ(stat(dir.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0700u);
    std::vector<uint8_t> p = Pattern(kTestPage, 6);
    for (int i = 0; i < 8; ++i) ASSERT_TRUE(store->Write(p.data(), p.size()).ok());
    EXPECT_TRUE(tmp.Entries(refuse_tmpfile ? "named" : "tmpfile").empty());
    EXPECT_NE(store->file_description().find(dir), std::string::npos) << store->file_description();
  }
}

// /dev/shm is tmpfs. Kernels before 6.6 refuse O_DIRECT there, newer ones
// accept it; the refusals are forced through FaultEnv so every fallback runs
// on any kernel.
TEST(SpillStoreTest, FallbacksOnTmpfs) {
  TempDir tmp("/dev/shm");
  ASSERT_TRUE(tmp.ok());
  // A sandbox may refuse io_uring even when the test does not.
  const bool uring_here = Env::Default()->NewUringQueue(1).ok();
  for (bool refuse_direct : {false, true}) {
    for (bool refuse_uring : {false, true}) {
      FaultEnv env(Env::Default());
      env.RefuseDirect(refuse_direct);
      env.RefuseUring(refuse_uring);
      auto store = MakeStore(SmallConfig(tmp.path(), 32), nullptr, &env);
      ASSERT_NE(store, nullptr);
      std::string mode = store->io_mode();
      SCOPED_TRACE(mode);
      if (!refuse_direct && !refuse_uring) std::printf("io mode on tmpfs: %s\n", mode.c_str());
      EXPECT_TRUE(KnownMode(mode));
      EXPECT_EQ(mode.rfind("io_uring", 0) == 0, uring_here && !refuse_uring);
      if (refuse_direct) {
        EXPECT_EQ(mode.find("+direct"), std::string::npos);
      }
      EXPECT_LT(mode.size(), 16u) << "must fit the stats segment's disk_io field";
      SyncRoundTrip(store.get(), 24);
      EXPECT_TRUE(tmp.Entries().empty());
    }
  }
}

TEST(SpillStoreTest, ConcurrentWritersAndReaders) {
  TempDir tmp;
  ASSERT_TRUE(tmp.ok());
  Counters c;
  auto store = MakeStore(SmallConfig(tmp.path(), 128), &c);
  ASSERT_NE(store, nullptr);
  constexpr int kThreads = 4, kPerThread = 24;
  std::vector<int> bad(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<uint8_t> back(kTestPage);
      for (int i = 0; i < kPerThread; ++i) {
        std::vector<uint8_t> p = Pattern(kTestPage, t * 1000 + i);
        Result<SpillSlot> s = store->Write(p.data(), p.size());
        if (!s.ok() ||
            !store->Read(s.value().index, back.data(), back.size(), s.value().checksum).ok() ||
            back != p) {
          ++bad[t];
          continue;
        }
        if (i % 2) store->Free(s.value().index);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(bad[t], 0) << "thread " << t;
  EXPECT_EQ(store->used_slots(), uint32_t(kThreads * kPerThread / 2));
  EXPECT_EQ(Counters::Get(c.spilled_pages), uint64_t(kThreads * kPerThread));
}

}  // namespace
}  // namespace kvtier
