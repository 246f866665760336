// Every injected storage fault against SpillStore: write errors leave the
// page with the caller, count spill_errors and back off (on a manual clock,
// no sleeps); read errors are retried once; corruption on disk is detected
// and reported naming the slot and the file; nothing bad reaches the caller.
#include <gtest/gtest.h>

#include <cstring>
#include <ostream>

#include "runtime/storage/fault_env.h"
#include "runtime/storage/spill_batch.h"
#include "runtime/storage/spill_store.h"
#include "storage_test_util.h"

namespace kvtier {
namespace {

using storage_test::kTestPage;
using storage_test::Pattern;
using storage_test::SmallConfig;
using storage_test::TempDir;

constexpr uint64_t kMs = 1'000'000;

bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

bool AllZero(const std::vector<uint8_t>& v) {
  for (uint8_t b : v) {
    if (b != 0) return false;
  }
  return true;
}

class SpillFaultsTest : public ::testing::Test {
 protected:
  void SetUp() override { Open(SmallConfig(tmp_.path(), 32)); }

  void Open(SpillStoreConfig config) {
    ASSERT_TRUE(tmp_.ok());
    store_.reset();
    env_.SetClock(1000 * kMs);
    Result<std::unique_ptr<SpillStore>> s = SpillStore::Create(config, &env_, &c_);
    ASSERT_TRUE(s.ok()) << s.status().message();
    store_ = std::move(s).value();
  }

  uint64_t Get(const std::atomic<uint64_t>& counter) const { return Counters::Get(counter); }

  TempDir tmp_;
  FaultEnv env_{Env::Default(), 7};
  Counters c_;
  std::unique_ptr<SpillStore> store_;
  std::vector<uint8_t> page_ = Pattern(kTestPage, 11);
};

struct WriteFaultCase {
  Fault fault;
  const char* message;
};

void PrintTo(const WriteFaultCase& k, std::ostream* os) { *os << FaultName(k.fault); }

class SpillWriteFaultTest : public SpillFaultsTest,
                            public ::testing::WithParamInterface<WriteFaultCase> {};

TEST_P(SpillWriteFaultTest, PageStaysWithCallerAndStoreBacksOffThenRecovers) {
  const WriteFaultCase& k = GetParam();
  env_.Arm(k.fault);
  Result<SpillSlot> r = store_->Write(page_.data(), page_.size());
  ASSERT_FALSE(r.ok()) << "the fault must make the spill fail";
  EXPECT_TRUE(Has(r.status().message(), k.message)) << r.status().message();
  EXPECT_TRUE(Has(r.status().message(), "stays in host memory")) << r.status().message();
  EXPECT_EQ(env_.injected(k.fault), 1u);
  EXPECT_EQ(Get(c_.spill_errors), 1u);
  EXPECT_EQ(Get(c_.disk_degraded), 1u);
  EXPECT_EQ(Get(c_.spilled_pages), 0u);
  EXPECT_EQ(store_->used_slots(), 0u) << "the failed write's slot is released";
  EXPECT_FALSE(store_->writable());

  // While backing off, writes fail at once without touching the disk.
  Result<SpillSlot> again = store_->Write(page_.data(), page_.size());
  ASSERT_FALSE(again.ok());
  EXPECT_TRUE(Has(again.status().message(), "backing off")) << again.status().message();
  EXPECT_EQ(Get(c_.spill_errors), 1u);

  env_.AdvanceClock(100 * kMs);  // the first backoff step
  EXPECT_TRUE(store_->writable());
  Result<SpillSlot> ok = store_->Write(page_.data(), page_.size());
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(Get(c_.disk_degraded), 0u);
  std::vector<uint8_t> back(kTestPage);
  ASSERT_TRUE(store_->Read(ok.value().index, back.data(), back.size(), ok.value().checksum).ok());
  EXPECT_EQ(back, page_);
}

INSTANTIATE_TEST_SUITE_P(Kinds, SpillWriteFaultTest,
                         ::testing::Values(WriteFaultCase{Fault::kWriteNoSpace, "No space left"},
                                           WriteFaultCase{Fault::kWriteIoError,
                                                          "Input/output error"},
                                           WriteFaultCase{Fault::kShortWrite, "short write"},
                                           WriteFaultCase{Fault::kAllocNoSpace, "No space left"}),
                         [](const auto& info) {
                           std::string n = FaultName(info.param.fault);
                           for (char& ch : n) ch = ch == '-' ? '_' : ch;
                           return n;
                         });

TEST_F(SpillFaultsTest, AGrowthStepRefusedForSpaceIsRetriedSmallerBeforeBackingOff) {
  // SmallConfig grows by 4 pages first, then doubles the file: 4, 8, 16...
  auto write = [&] { return store_->Write(page_.data(), page_.size()); };
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(write().ok()) << i;
  // The 9th page needs a doubled step (8 pages); the disk has room for less.
  env_.Arm(Fault::kAllocNoSpace, 1);
  Result<SpillSlot> smaller = write();
  ASSERT_TRUE(smaller.ok()) << smaller.status().message();
  EXPECT_EQ(env_.injected(Fault::kAllocNoSpace), 1u);
  EXPECT_EQ(Get(c_.spill_errors), 0u);
  EXPECT_TRUE(store_->writable());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(write().ok()) << i;  // fills the smaller step
  // Neither the doubled step nor the retry fits: a spill error, backoff.
  env_.Arm(Fault::kAllocNoSpace, 2);
  Result<SpillSlot> refused = write();
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(Has(refused.status().message(), "No space left")) << refused.status().message();
  EXPECT_EQ(env_.injected(Fault::kAllocNoSpace), 3u);
  EXPECT_EQ(Get(c_.spill_errors), 1u);
  EXPECT_FALSE(store_->writable());
  EXPECT_EQ(store_->used_slots(), 12u);
}

TEST_F(SpillFaultsTest, ABrokenQueueLosesNoSlot) {
  constexpr int kPages = 12;
  std::vector<uint8_t> pages = Pattern(kPages * kTestPage, 5);
  std::vector<SpillCompletion> done;
  {
    Result<std::unique_ptr<SpillBatch>> batch = store_->NewBatch();
    ASSERT_TRUE(batch.ok()) << batch.status().message();
    for (int i = 0; i < kPages; ++i) {
      batch.value()->AddWrite(pages.data() + i * kTestPage, kTestPage, i);
    }
    batch.value()->Submit();  // the queue depth (4) in flight, the rest queued
    env_.BreakQueues(true);
    Status st = batch.value()->WaitAll(&done);
    EXPECT_FALSE(st.ok());
    EXPECT_TRUE(Has(st.message(), "broken (injected)")) << st.message();
    // The broken batch is dropped with writes in flight and never reaped.
  }
  env_.BreakQueues(false);
  uint32_t owned = 0;
  for (const SpillCompletion& c : done) owned += c.status.ok() ? 1 : 0;
  EXPECT_EQ(store_->used_slots(), owned) << "slots of writes nobody took must come back";
  EXPECT_EQ(Get(c_.disk_used_bytes), uint64_t{owned} * kTestPage);
  for (const SpillCompletion& c : done) {
    if (c.status.ok()) store_->Free(c.slot.index);
  }
  EXPECT_EQ(store_->used_slots(), 0u);
  EXPECT_EQ(Get(c_.disk_used_bytes), 0u);
  // The store still works with a fresh batch.
  Result<SpillSlot> again = store_->Write(page_.data(), page_.size());
  ASSERT_TRUE(again.ok()) << again.status().message();
}

TEST_F(SpillFaultsTest, BackoffDoublesWhileWritesKeepFailing) {
  env_.Arm(Fault::kWriteIoError, 2);
  EXPECT_FALSE(store_->Write(page_.data(), page_.size()).ok());
  env_.AdvanceClock(100 * kMs);
  EXPECT_FALSE(store_->Write(page_.data(), page_.size()).ok()) << "the probe write fails too";
  EXPECT_EQ(Get(c_.spill_errors), 2u);
  env_.AdvanceClock(100 * kMs);
  EXPECT_FALSE(store_->writable()) << "the second wait is 200 ms";
  env_.AdvanceClock(100 * kMs);
  EXPECT_TRUE(store_->writable());
  EXPECT_TRUE(store_->Write(page_.data(), page_.size()).ok());
  EXPECT_EQ(Get(c_.disk_degraded), 0u);
}

TEST_F(SpillFaultsTest, ReadErrorIsRetriedOnce) {
  Result<SpillSlot> s = store_->Write(page_.data(), page_.size());
  ASSERT_TRUE(s.ok());
  env_.Arm(Fault::kReadIoError, 1);
  std::vector<uint8_t> back(kTestPage);
  ReadFailure why;
  Status st = store_->Read(s.value().index, back.data(), back.size(), s.value().checksum, &why);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(why, ReadFailure::kNone);
  EXPECT_EQ(back, page_);
  EXPECT_EQ(env_.injected(Fault::kReadIoError), 1u);
  EXPECT_EQ(Get(c_.restore_errors), 1u);
}

TEST_F(SpillFaultsTest, PersistentReadErrorIsAClearError) {
  Result<SpillSlot> s = store_->Write(page_.data(), page_.size());
  ASSERT_TRUE(s.ok());
  env_.Arm(Fault::kReadIoError, -1);
  std::vector<uint8_t> back(kTestPage, 0xaa);
  ReadFailure why;
  Status st = store_->Read(s.value().index, back.data(), back.size(), s.value().checksum, &why);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(why, ReadFailure::kIoError);
  EXPECT_TRUE(Has(st.message(), "spill slot " + std::to_string(s.value().index))) << st.message();
  EXPECT_TRUE(Has(st.message(), store_->file_description())) << st.message();
  EXPECT_TRUE(Has(st.message(), "Input/output error")) << st.message();
  EXPECT_EQ(Get(c_.restore_errors), 2u);
  EXPECT_TRUE(AllZero(back)) << "no stale or partial bytes are left for the caller";
}

TEST_F(SpillFaultsTest, TransientBitFlipOnReadIsRetried) {
  Result<SpillSlot> s = store_->Write(page_.data(), page_.size());
  ASSERT_TRUE(s.ok());
  env_.Arm(Fault::kReadBitFlip, 1);
  std::vector<uint8_t> back(kTestPage);
  ASSERT_TRUE(store_->Read(s.value().index, back.data(), back.size(), s.value().checksum).ok());
  EXPECT_EQ(back, page_);
  EXPECT_EQ(env_.injected(Fault::kReadBitFlip), 1u);
  EXPECT_EQ(Get(c_.checksum_mismatches), 1u);
}

// A fork child reads its parent's spilled pages on its own (no locks, no
// batches), and retries a bad read once as the parent does.
TEST_F(SpillFaultsTest, AForkChildsReadIsRetriedOnceToo) {
  for (const Fault fault : {Fault::kReadBitFlip, Fault::kReadIoError}) {
    SCOPED_TRACE(FaultName(fault));
    Result<SpillSlot> s = store_->Write(page_.data(), page_.size(), {2, 5});
    ASSERT_TRUE(s.ok());
    AlignedBuffer back = AlignedBuffer::Allocate(kTestPage).value();
    env_.Arm(fault, 1);
    ASSERT_TRUE(
        store_->ReadInForkChild(s.value().index, back.data(), s.value().checksum, {2, 5}).ok());
    EXPECT_EQ(memcmp(back.data(), page_.data(), kTestPage), 0);
    EXPECT_EQ(env_.injected(fault), 1u);
    // Wrong twice: an error that says so, never the bytes.
    env_.Arm(fault, 2);
    const Status twice =
        store_->ReadInForkChild(s.value().index, back.data(), s.value().checksum, {2, 5});
    EXPECT_FALSE(twice.ok());
    EXPECT_TRUE(Has(twice.message(), "on the read and on its retry")) << twice.message();
    env_.Clear();
  }
}

// Batched reads into aligned buffers are verified after the queue is
// refilled; their retries must still happen, once.
TEST_F(SpillFaultsTest, BatchedReadsAreRetriedOnce) {
  constexpr int kPages = 8;
  Result<AlignedBuffer> dst = AlignedBuffer::Allocate(kPages * kTestPage);
  ASSERT_TRUE(dst.ok());
  std::vector<SpillSlot> slots;
  for (int i = 0; i < kPages; ++i) {
    Result<SpillSlot> s = store_->Write(page_.data(), page_.size());
    ASSERT_TRUE(s.ok());
    slots.push_back(s.value());
  }
  for (bool aligned : {true, false}) {
    SCOPED_TRACE(aligned ? "zero copy" : "bounce");
    Counters::Set(c_.checksum_mismatches, 0);
    Counters::Set(c_.restore_errors, 0);
    env_.Arm(Fault::kReadBitFlip, 1, 2);
    env_.Arm(Fault::kReadIoError, 1, 5);
    Result<std::unique_ptr<SpillBatch>> b = store_->NewBatch();
    ASSERT_TRUE(b.ok());
    std::vector<uint8_t> unaligned(kPages * kTestPage + 1);
    uint8_t* base = aligned ? dst.value().data() : unaligned.data() + 1;
    for (int i = 0; i < kPages; ++i) {
      b.value()->AddRead(slots[i].index, base + i * kTestPage, kTestPage, slots[i].checksum, i);
    }
    std::vector<SpillCompletion> done;
    ASSERT_TRUE(b.value()->WaitAll(&done).ok());
    ASSERT_EQ(done.size(), size_t(kPages));
    for (const SpillCompletion& d : done) {
      EXPECT_TRUE(d.status.ok()) << d.status.message();
      EXPECT_EQ(memcmp(base + d.tag * kTestPage, page_.data(), kTestPage), 0) << "page " << d.tag;
    }
    EXPECT_EQ(Get(c_.checksum_mismatches), 1u);
    EXPECT_EQ(Get(c_.restore_errors), 1u);
  }
}

TEST_F(SpillFaultsTest, BitFlipOnDiskIsDetectedAsCorruption) {
  env_.Arm(Fault::kDiskBitFlip, 1, 1);  // the second page written
  std::vector<SpillSlot> slots;
  for (int i = 0; i < 3; ++i) {
    Result<SpillSlot> s = store_->Write(page_.data(), page_.size());
    ASSERT_TRUE(s.ok()) << s.status().message();
    slots.push_back(s.value());
  }
  ASSERT_EQ(env_.injected(Fault::kDiskBitFlip), 1u);
  std::vector<uint8_t> back(kTestPage, 0xaa);
  ReadFailure why;
  Status st = store_->Read(slots[1].index, back.data(), back.size(), slots[1].checksum, &why);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(why, ReadFailure::kCorruption);
  EXPECT_TRUE(Has(st.message(), "spill slot " + std::to_string(slots[1].index))) << st.message();
  EXPECT_TRUE(Has(st.message(), store_->file_description())) << st.message();
  EXPECT_TRUE(Has(st.message(), "corrupt")) << st.message();
  EXPECT_EQ(Get(c_.checksum_mismatches), 2u) << "the read and its retry";
  EXPECT_TRUE(AllZero(back));

  // The batched path reports the same, and the neighbours are intact.
  Result<std::unique_ptr<SpillBatch>> b = store_->NewBatch();
  ASSERT_TRUE(b.ok());
  std::vector<std::vector<uint8_t>> dst(3, std::vector<uint8_t>(kTestPage));
  for (int i = 0; i < 3; ++i)
    b.value()->AddRead(slots[i].index, dst[i].data(), kTestPage, slots[i].checksum, i);
  std::vector<SpillCompletion> done;
  ASSERT_TRUE(b.value()->WaitAll(&done).ok());
  ASSERT_EQ(done.size(), 3u);
  for (const SpillCompletion& d : done) {
    EXPECT_EQ(d.status.ok(), d.tag != 1) << d.status.message();
    EXPECT_EQ(d.failure, d.tag == 1 ? ReadFailure::kCorruption : ReadFailure::kNone);
  }
  EXPECT_EQ(dst[0], page_);
  EXPECT_EQ(dst[2], page_);
}

TEST_F(SpillFaultsTest, SlowDeviceStaysCorrect) {
  env_.SetSlowDelay(1 * kMs);
  env_.SetRate(Fault::kSlow, 1.0);
  Result<std::unique_ptr<SpillBatch>> batch = store_->NewBatch();
  ASSERT_TRUE(batch.ok());
  SpillBatch& b = *batch.value();
  constexpr int kPages = 12;
  std::vector<std::vector<uint8_t>> pages;
  for (int i = 0; i < kPages; ++i) pages.push_back(Pattern(kTestPage, 100 + i));
  for (int i = 0; i < kPages; ++i) b.AddWrite(pages[i].data(), kTestPage, i);
  std::vector<SpillCompletion> done;
  ASSERT_TRUE(b.WaitAll(&done).ok());
  std::vector<std::vector<uint8_t>> back(kPages, std::vector<uint8_t>(kTestPage));
  for (const SpillCompletion& d : done) {
    ASSERT_TRUE(d.status.ok()) << d.status.message();
    b.AddRead(d.slot.index, back[d.tag].data(), kTestPage, d.slot.checksum, d.tag);
  }
  done.clear();
  ASSERT_TRUE(b.WaitAll(&done).ok());
  for (const SpillCompletion& d : done) EXPECT_TRUE(d.status.ok()) << d.status.message();
  EXPECT_EQ(back, pages);
  EXPECT_GE(env_.injected(Fault::kSlow), 2u * kPages);
}

// Every fault kind at once, at random: each page either comes back exactly
// or fails loudly, and every injected error shows in the counters.
TEST_F(SpillFaultsTest, RandomFaultsLoseNothing) {
  for (IoEngine engine : {IoEngine::kPread, IoEngine::kAuto}) {
    SCOPED_TRACE(engine == IoEngine::kPread ? "pread (deterministic)" : "auto");
    FaultEnv env(Env::Default(), 1234);
    Counters c;
    SpillStoreConfig cfg = SmallConfig(tmp_.path(), 160);
    cfg.engine = engine;
    Result<std::unique_ptr<SpillStore>> created = SpillStore::Create(cfg, &env, &c);
    ASSERT_TRUE(created.ok()) << created.status().message();
    SpillStore& store = *created.value();
    env.SetClock(0);
    for (Fault f :
         {Fault::kWriteNoSpace, Fault::kWriteIoError, Fault::kShortWrite, Fault::kDiskBitFlip}) {
      env.SetRate(f, 0.08);
    }
    env.SetRate(Fault::kReadIoError, 0.15);
    env.SetRate(Fault::kReadBitFlip, 0.15);
    // The 4th growth is a doubled step: refused, and so is its retry at
    // the first step's size (one spill error for the two).
    env.Arm(Fault::kAllocNoSpace, 2, 3);

    constexpr int kPages = 128;
    Result<AlignedBuffer> src = AlignedBuffer::Allocate(kPages * kTestPage);
    Result<AlignedBuffer> dst = AlignedBuffer::Allocate(kPages * kTestPage);
    ASSERT_TRUE(src.ok() && dst.ok());
    std::vector<uint8_t> data = Pattern(kPages * kTestPage, 77);
    memcpy(src.value().data(), data.data(), data.size());
    Result<std::unique_ptr<SpillBatch>> batch = store.NewBatch();
    ASSERT_TRUE(batch.ok());
    SpillBatch& b = *batch.value();

    std::vector<bool> spilled(kPages, false);
    std::vector<SpillSlot> slots(kPages);
    int left = kPages;
    for (int round = 0; left > 0 && round < 200; ++round) {
      if (!store.writable()) env.AdvanceClock(31'000 * kMs);
      for (int i = 0; i < kPages; ++i) {
        if (!spilled[i]) b.AddWrite(src.value().data() + i * kTestPage, kTestPage, i);
      }
      std::vector<SpillCompletion> done;
      ASSERT_TRUE(b.WaitAll(&done).ok());
      for (const SpillCompletion& d : done) {
        if (d.status.ok()) {
          spilled[d.tag] = true;
          slots[d.tag] = d.slot;
          --left;
        } else {
          EXPECT_TRUE(Has(d.status.message(), "stays in host memory")) << d.status.message();
        }
      }
    }
    ASSERT_EQ(left, 0) << "every page spills once the disk recovers";
    EXPECT_EQ(memcmp(src.value().data(), data.data(), data.size()), 0)
        << "sources are never touched";

    for (int i = 0; i < kPages; ++i) {
      b.AddRead(slots[i].index, dst.value().data() + i * kTestPage, kTestPage, slots[i].checksum,
                i);
    }
    std::vector<SpillCompletion> done;
    ASSERT_TRUE(b.WaitAll(&done).ok());
    ASSERT_EQ(done.size(), size_t(kPages));
    uint64_t failed = 0;
    for (const SpillCompletion& d : done) {
      const uint8_t* got = dst.value().data() + d.tag * kTestPage;
      if (d.status.ok()) {
        EXPECT_EQ(memcmp(got, data.data() + d.tag * kTestPage, kTestPage), 0) << "page " << d.tag;
      } else {
        ++failed;
        EXPECT_TRUE(d.failure == ReadFailure::kCorruption || d.failure == ReadFailure::kIoError);
        EXPECT_TRUE(AllZero(std::vector<uint8_t>(got, got + kTestPage))) << "page " << d.tag;
      }
    }
    std::printf("injected:");
    for (int f = 0; f < kFaultKinds; ++f) {
      std::printf(" %s=%llu", FaultName(Fault(f)), (unsigned long long)env.injected(Fault(f)));
    }
    std::printf("; reads failed %llu\n", (unsigned long long)failed);
    uint64_t write_faults = env.injected(Fault::kWriteNoSpace) +
                            env.injected(Fault::kWriteIoError) + env.injected(Fault::kShortWrite) +
                            env.injected(Fault::kAllocNoSpace) / 2;
    EXPECT_EQ(Counters::Get(c.spill_errors), write_faults);
    EXPECT_EQ(Counters::Get(c.restore_errors), env.injected(Fault::kReadIoError));
    EXPECT_GE(Counters::Get(c.checksum_mismatches), env.injected(Fault::kReadBitFlip));
    EXPECT_GE(failed, env.injected(Fault::kDiskBitFlip))
        << "a page flipped on disk never reads back ok";
    if (engine == IoEngine::kPread) {
      for (int f = 0; f < kFaultKinds; ++f) {
        if (Fault(f) != Fault::kSlow) {
          EXPECT_GT(env.injected(Fault(f)), 0u) << FaultName(Fault(f));
        }
      }
    }
  }
}

TEST(FaultSpec, ParsesEveryKindAndTheSlowDelay) {
  Result<FaultSpec> spec = ParseFaultSpec("write-enospc:0.3,read-eio:0.002,slow:0.05@2ms");
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_DOUBLE_EQ(spec.value().rates[static_cast<int>(Fault::kWriteNoSpace)], 0.3);
  EXPECT_DOUBLE_EQ(spec.value().rates[static_cast<int>(Fault::kReadIoError)], 0.002);
  EXPECT_DOUBLE_EQ(spec.value().rates[static_cast<int>(Fault::kSlow)], 0.05);
  EXPECT_EQ(spec.value().slow_ns, 2'000'000u);
  EXPECT_TRUE(spec.value().any());
  for (int k = 0; k < kFaultKinds; ++k) {
    const std::string one = std::string(FaultName(static_cast<Fault>(k))) + ":1" +
                            (static_cast<Fault>(k) == Fault::kSlow ? "@250us" : "");
    EXPECT_TRUE(ParseFaultSpec(one).ok()) << one;
  }
  for (const char* none : {"", "none"}) {
    ASSERT_TRUE(ParseFaultSpec(none).ok()) << none;
    EXPECT_FALSE(ParseFaultSpec(none).value().any()) << none;
  }
}

TEST(FaultSpec, RefusesWhatItCannotInjectWithTheAcceptedForm) {
  for (const char* bad :
       {"write-eio", "write-eio:", "write-eio:2", "write-eio:-0.1", "eio:0.1", "slow:0.1",
        "slow:0.1@", "slow:0.1@5s", "slow:0.1@99999999ms", "write-eio:0.1@5ms", "write-eio:nan",
        "write-eio:0.1,", ",write-eio:0.1", "write-eio:0.1x"}) {
    Result<FaultSpec> spec = ParseFaultSpec(bad);
    EXPECT_FALSE(spec.ok()) << bad;
    if (!spec.ok()) {
      const std::string message = spec.status().message();
      EXPECT_EQ(message.rfind("KVTIER_DISK_FAULTS item '", 0), 0u) << message;
      EXPECT_NE(message.find("(accepted: "), std::string::npos) << message;
    }
  }
}

TEST(FaultSpec, AnEnvGivenASpecInjectsAndCountsWhatFired) {
  FaultEnv env(Env::Default(), 7);
  Result<FaultSpec> spec = ParseFaultSpec("write-eio:1");
  ASSERT_TRUE(spec.ok());
  env.Apply(spec.value());
  EXPECT_TRUE(env.Fires(Fault::kWriteIoError));
  EXPECT_FALSE(env.Fires(Fault::kReadIoError));
  env.Count(Fault::kWriteIoError);
  EXPECT_EQ(InjectedSummary(env), "write-eio 1");
}

}  // namespace
}  // namespace kvtier
