// Tests of PageIo::ReadRuns: runs of pages in consecutive slots come back
// whole and verified, with at most a window's worth queued (each run's
// target asked for only then), and a run whose read stays wrong is read
// again a page at a time, so every page is reported once, and only a page
// that is really lost reports an error; a queue that breaks mid-way has
// what it did not complete read page by page, and the next read gets a new
// queue.
#include "runtime/storage/page_io.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <vector>

#include "runtime/storage/fault_env.h"
#include "runtime/storage/spill_store.h"
#include "storage_test_util.h"

namespace kvtier {
namespace {

using storage_test::kTestPage;
using storage_test::Pattern;
using storage_test::SmallConfig;
using storage_test::TempDir;

constexpr uint32_t kPages = 40;
constexpr uint32_t kRun = 8;  // pages a run

class PageIoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(tmp_.ok());
    Result<std::unique_ptr<SpillStore>> s =
        SpillStore::Create(SmallConfig(tmp_.path(), 64), &env_, &c_);
    ASSERT_TRUE(s.ok()) << s.status().message();
    store_ = std::move(s).value();
    io_ = std::make_unique<PageIo>(store_.get());
    // The pages of region 3, written in one batch: consecutive slots.
    std::vector<PageIo::Source> sources;
    for (uint32_t p = 0; p < kPages; ++p) {
      pages_.push_back(Pattern(kTestPage, 100 + p));
      sources.push_back({pages_[p].data(), kTestPage, {3, p}});
    }
    slots_.resize(kPages);
    io_->Write(sources, [&](size_t i, const Result<SpillSlot>& slot) {
      ASSERT_TRUE(slot.ok()) << slot.status().message();
      slots_[i] = slot.value();
    });
    for (uint32_t p = 1; p < kPages; ++p) {
      ASSERT_EQ(slots_[p].index, slots_[p - 1].index + 1) << "the test needs consecutive slots";
    }
    for (const SpillSlot& s : slots_) checksums_.push_back(s.checksum);
    dst_ = AlignedBuffer::Allocate(kPages * kTestPage).value();
  }
  void TearDown() override { io_.reset(); }

  // Reads the pages back as runs of kRun, `window` bytes at a time; what
  // each page reported, and the most bytes of targets asked for and not yet
  // fully reported at once.
  std::map<uint32_t, std::vector<Status>> ReadBack(
      size_t window, size_t* most_open,
      const std::function<void(size_t, uint32_t)>& on_page = nullptr) {
    std::map<uint32_t, std::vector<Status>> got;
    size_t open = 0;
    *most_open = 0;
    io_->ReadRuns(
        kPages / kRun,
        [&](size_t i) {
          open += kRun * kTestPage;
          *most_open = std::max(*most_open, open);
          const uint32_t first = static_cast<uint32_t>(i) * kRun;
          return PageIo::RunTarget{slots_[first].index, kRun, &checksums_[first],
                                   dst_.data() + first * kTestPage, PagePlace{3, first}};
        },
        window,
        [&](size_t i, uint32_t k, const Status& status) {
          got[static_cast<uint32_t>(i) * kRun + k].push_back(status);
          if (k + 1 == kRun) open -= kRun * kTestPage;
          if (on_page) on_page(i, k);
        },
        [&](size_t i) {
          AlignedBuffer& fresh = moved_[i];
          fresh = AlignedBuffer::Allocate(kRun * kTestPage).value();
          return fresh.data();
        });
    return got;
  }

  // Where page p's bytes ended up: its run's new buffer if it was moved.
  const uint8_t* PageAt(uint32_t p) const {
    auto it = moved_.find(p / kRun);
    if (it == moved_.end()) return dst_.data() + p * kTestPage;
    return it->second.data() + (p % kRun) * kTestPage;
  }

  TempDir tmp_;
  FaultEnv env_{Env::Default(), 5};
  Counters c_;
  std::unique_ptr<SpillStore> store_;
  std::unique_ptr<PageIo> io_;
  std::vector<std::vector<uint8_t>> pages_;
  std::vector<SpillSlot> slots_;
  std::vector<uint64_t> checksums_;
  AlignedBuffer dst_;
  std::map<size_t, AlignedBuffer> moved_;  // runs read again into new buffers
};

TEST_F(PageIoTest, RunsComeBackWholeWithAtMostAWindowQueued) {
  size_t most_open = 0;
  const auto got = ReadBack(2 * kRun * kTestPage, &most_open);
  ASSERT_EQ(got.size(), kPages);
  for (uint32_t p = 0; p < kPages; ++p) {
    ASSERT_EQ(got.at(p).size(), 1u) << "page " << p;
    EXPECT_TRUE(got.at(p)[0].ok()) << "page " << p << ": " << got.at(p)[0].message();
    EXPECT_EQ(memcmp(dst_.data() + p * kTestPage, pages_[p].data(), kTestPage), 0) << p;
  }
  EXPECT_LE(most_open, 2 * kRun * kTestPage) << "more than the window was queued";
  EXPECT_GE(most_open, 2 * kRun * kTestPage) << "the window was never filled";
}

TEST_F(PageIoTest, ARunThatStaysWrongIsReadAgainPageByPage) {
  // The first run's read and its retry come back flipped (a window of one
  // run: nothing else is read meanwhile); then its pages, one by one, come
  // back right.
  env_.Arm(Fault::kReadBitFlip, 2);
  size_t most_open = 0;
  auto got = ReadBack(kRun * kTestPage, &most_open);
  ASSERT_EQ(got.size(), kPages);
  for (uint32_t p = 0; p < kPages; ++p) {
    ASSERT_EQ(got.at(p).size(), 1u) << "page " << p;
    EXPECT_TRUE(got.at(p)[0].ok()) << "page " << p << ": " << got.at(p)[0].message();
    EXPECT_EQ(memcmp(dst_.data() + p * kTestPage, pages_[p].data(), kTestPage), 0) << p;
  }
  EXPECT_GE(Counters::Get(c_.checksum_mismatches), 2u);

  // Every read wrong: every page reports its loss, once.
  env_.Arm(Fault::kReadBitFlip, -1);
  got = ReadBack(kPages * kTestPage, &most_open);
  ASSERT_EQ(got.size(), kPages);
  for (uint32_t p = 0; p < kPages; ++p) {
    ASSERT_EQ(got.at(p).size(), 1u) << "page " << p;
    EXPECT_FALSE(got.at(p)[0].ok()) << "page " << p;
  }
}

TEST_F(PageIoTest, AQueueThatBreaksMidWayHasWhatItDidNotCompleteReadPageByPage) {
  // Once the first run is back, the queue breaks at the next read it takes:
  // the runs it has in flight then never come back through it. ReadRuns
  // reads them, and the runs after, page by page (the store's own lanes).
  const uint64_t reads = env_.requests(IoKind::kRead);
  size_t most_open = 0;
  auto got = ReadBack(2 * kRun * kTestPage, &most_open, [&](size_t i, uint32_t k) {
    if (i == 0 && k + 1 == kRun) env_.BreakQueueAtRead(1);
  });
  EXPECT_FALSE(env_.queue_break_armed()) << "no queue took the break";
  ASSERT_EQ(got.size(), kPages);
  for (uint32_t p = 0; p < kPages; ++p) {
    ASSERT_EQ(got.at(p).size(), 1u) << "page " << p;
    EXPECT_TRUE(got.at(p)[0].ok()) << "page " << p << ": " << got.at(p)[0].message();
    EXPECT_EQ(memcmp(dst_.data() + p * kTestPage, pages_[p].data(), kTestPage), 0) << p;
  }
  // At most four runs through the queue (the first, one in flight with it,
  // the two queued after it came back); at least the last two runs, which
  // it never took, a page at a time.
  const uint64_t after_break = env_.requests(IoKind::kRead) - reads;
  EXPECT_GE(after_break, 1 + 2 * kRun) << "no run was read page by page";
  EXPECT_LE(after_break, 4 + 4 * kRun);

  // The next read back gets a new queue: runs again.
  const uint64_t before = env_.requests(IoKind::kRead);
  got = ReadBack(2 * kRun * kTestPage, &most_open);
  ASSERT_EQ(got.size(), kPages);
  for (uint32_t p = 0; p < kPages; ++p) EXPECT_TRUE(got.at(p)[0].ok()) << p;
  EXPECT_EQ(env_.requests(IoKind::kRead) - before, kPages / kRun);
}

TEST_F(PageIoTest, AReadThatMayStillLandAfterItsQueueBrokeNeverHasItsBufferUsedAgain) {
  // The queue breaks with runs in flight, and the kernel completes them
  // only after the owner stopped waiting (HoldLateReads): each lands later,
  // over whatever its buffer holds then. Their runs are read again into new
  // buffers; the bytes handed on stay right after the late reads land.
  env_.HoldLateReads(true);
  size_t most_open = 0;
  auto got = ReadBack(2 * kRun * kTestPage, &most_open, [&](size_t i, uint32_t k) {
    if (i == 0 && k + 1 == kRun) env_.BreakQueueAtRead(1);
  });
  EXPECT_FALSE(env_.queue_break_armed()) << "no queue took the break";
  const size_t late = env_.LandLateReads();
  ASSERT_GE(late, 1u) << "no read was in flight when the queue broke";
  EXPECT_EQ(moved_.size(), late) << "each run a late read may write moves to a new buffer";
  ASSERT_EQ(got.size(), kPages);
  for (uint32_t p = 0; p < kPages; ++p) {
    ASSERT_EQ(got.at(p).size(), 1u) << "page " << p;
    EXPECT_TRUE(got.at(p)[0].ok()) << "page " << p << ": " << got.at(p)[0].message();
    EXPECT_EQ(memcmp(PageAt(p), pages_[p].data(), kTestPage), 0)
        << "page " << p << " was overwritten by a read that landed late";
  }
  // The late reads did land: in the buffers given up.
  for (const auto& [run, buffer] : moved_) {
    EXPECT_EQ(dst_.data()[run * kRun * kTestPage], FaultEnv::kLateByte) << "run " << run;
  }
}

}  // namespace
}  // namespace kvtier
