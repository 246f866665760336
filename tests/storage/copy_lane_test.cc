// Tests of CopyLane: every copy lands once with its bytes, copies go to the
// helper while the caller goes on, the helper's backlog is bounded (the
// caller copies past it), Wait waits for the helper's copies, a second
// caller and an unshared batch copy inline, and a lane without a helper
// copies everything inline.
#include "runtime/storage/copy_lane.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

namespace kvtier {
namespace {

// Every wait below ends long before this unless the lane is broken.
constexpr auto kDeadline = std::chrono::seconds(20);

// A gate a copy's `done` can wait at until the test opens it.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  bool entered = false;

  bool Hold() {  // false when never opened in time
    std::unique_lock<std::mutex> lock(mu);
    entered = true;
    cv.notify_all();
    return cv.wait_for(lock, kDeadline, [&] { return open; });
  }
  bool AwaitEntered() {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, kDeadline, [&] { return entered; });
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu);
    open = true;
    cv.notify_all();
  }
};

TEST(CopyLaneTest, EveryCopyLandsOnceWithItsBytes) {
  CopyLane lane(/*helper=*/true, "test-copy");
  ASSERT_TRUE(lane.has_helper());
  constexpr size_t kPages = 500, kLen = 4096 + 24;
  std::vector<uint8_t> src(kPages * kLen), dst(kPages * kLen, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7 + i / kLen);
  std::vector<std::atomic<int>> done(kPages);
  {
    CopyLane::Batch batch(lane, /*share=*/true);
    for (size_t p = 0; p < kPages; ++p) {
      batch.Copy(&dst[p * kLen], &src[p * kLen], kLen, [&done, p] { done[p].fetch_add(1); });
    }
    batch.Wait();
    EXPECT_TRUE(batch.shared());
    for (size_t p = 0; p < kPages; ++p) ASSERT_EQ(done[p].load(), 1) << "page " << p;
    EXPECT_EQ(dst, src);
    // The batch goes on after a Wait; its destructor waits too.
    batch.Copy(&dst[0], &src[kLen], kLen, [&done] { done[0].fetch_add(1); });
  }
  EXPECT_EQ(done[0].load(), 2);
  EXPECT_EQ(memcmp(&dst[0], &src[kLen], kLen), 0);
}

// One byte copied: a batch takes the helper at its first copy.
void CopyOne(CopyLane::Batch& batch) {
  static const uint8_t from = 1;
  static uint8_t to = 0;
  batch.Copy(&to, &from, 1, [] {});
  batch.Wait();
}

TEST(CopyLaneTest, TheHelperCopiesWhileTheCallerGoesOnAndWaitWaitsForIt) {
  CopyLane lane(true, "test-copy");
  ASSERT_TRUE(lane.has_helper());
  uint8_t src[64], dst[64] = {};
  memset(src, 0x5A, sizeof(src));
  Gate gate;
  std::thread::id copier;
  bool opened_in_time = false;
  std::atomic<bool> finished{false};
  CopyLane::Batch batch(lane, true);
  batch.Copy(dst, src, sizeof(src), [&] {
    copier = std::this_thread::get_id();
    opened_in_time = gate.Hold();
    finished = true;
  });
  // Copy returned while its done() is held: it runs on another thread.
  ASSERT_TRUE(gate.AwaitEntered()) << "the copy never started";
  EXPECT_FALSE(finished.load());
  std::thread opener([&] { gate.Open(); });
  batch.Wait();
  EXPECT_TRUE(finished.load()) << "Wait returned before the helper's copy ended";
  opener.join();
  EXPECT_TRUE(opened_in_time);
  EXPECT_NE(copier, std::this_thread::get_id());
  EXPECT_EQ(memcmp(dst, src, sizeof(src)), 0);
}

TEST(CopyLaneTest, PastTheBacklogTheCallerCopiesItself) {
  CopyLane lane(true, "test-copy");
  // Copies of a quarter of the backlog each: four fill it.
  constexpr size_t kLen = CopyLane::kBacklogBytes / 4;
  std::vector<uint8_t> src(kLen);
  for (size_t i = 0; i < kLen; ++i) src[i] = static_cast<uint8_t>(i * 13);
  Gate gate;
  const std::thread::id me = std::this_thread::get_id();
  std::vector<std::thread::id> where(1 + 4 + 1);
  std::vector<std::vector<uint8_t>> dst(where.size(), std::vector<uint8_t>(kLen));  // one each
  std::thread opener;
  {
    CopyLane::Batch batch(lane, true);
    // The helper holds the first copy; the next four wait in its queue.
    batch.Copy(dst[0].data(), src.data(), kLen, [&] {
      where[0] = std::this_thread::get_id();
      gate.Hold();
    });
    ASSERT_TRUE(gate.AwaitEntered());
    for (size_t i = 1; i < where.size(); ++i) {
      batch.Copy(dst[i].data(), src.data(), kLen,
                 [&where, i] { where[i] = std::this_thread::get_id(); });
    }
    // The one past the backlog ran here, before Copy returned.
    EXPECT_EQ(where.back(), me);
    for (size_t i = 1; i + 1 < where.size(); ++i) EXPECT_EQ(where[i], std::thread::id()) << i;
    opener = std::thread([&] { gate.Open(); });
  }
  opener.join();
  EXPECT_NE(where[0], me);
  for (size_t i = 1; i + 1 < where.size(); ++i) EXPECT_NE(where[i], std::thread::id()) << i;
  for (size_t i = 0; i < dst.size(); ++i) EXPECT_EQ(dst[i], src) << i;
}

TEST(CopyLaneTest, ASecondCallerAndAnUnsharedBatchCopyInline) {
  CopyLane lane(true, "test-copy");
  uint8_t src[16] = {9}, dst[16] = {};
  const std::thread::id me = std::this_thread::get_id();
  CopyLane::Batch first(lane, true);
  EXPECT_FALSE(first.shared()) << "taken before its first copy";
  CopyOne(first);
  EXPECT_TRUE(first.shared());
  std::thread::id where;
  {
    CopyLane::Batch second(lane, true);  // the helper is the first's
    second.Copy(dst, src, sizeof(src), [&] { where = std::this_thread::get_id(); });
    EXPECT_EQ(where, me);
    EXPECT_FALSE(second.shared());
  }
  where = std::thread::id();
  {
    CopyLane::Batch unshared(lane, false);
    unshared.Copy(dst, src, sizeof(src), [&] { where = std::this_thread::get_id(); });
    EXPECT_EQ(where, me);
    EXPECT_FALSE(unshared.shared());
  }
  first.Wait();
  EXPECT_EQ(dst[0], 9);
}

TEST(CopyLaneTest, TheHelperIsFreeAgainWhenABatchEnds) {
  CopyLane lane(true, "test-copy");
  {
    CopyLane::Batch batch(lane, true);
    CopyOne(batch);
    EXPECT_TRUE(batch.shared());
  }
  CopyLane::Batch again(lane, true);
  CopyOne(again);
  EXPECT_TRUE(again.shared());
}

TEST(CopyLaneTest, ALaneWithoutAHelperCopiesInline) {
  CopyLane lane(/*helper=*/false, "test-copy");
  EXPECT_FALSE(lane.has_helper());
  uint8_t src[32], dst[32] = {};
  memset(src, 0x33, sizeof(src));
  CopyLane::Batch batch(lane, true);
  std::thread::id where;
  batch.Copy(dst, src, sizeof(src), [&] { where = std::this_thread::get_id(); });
  EXPECT_EQ(where, std::this_thread::get_id());
  EXPECT_FALSE(batch.shared());
  EXPECT_EQ(memcmp(dst, src, sizeof(src)), 0);
}

}  // namespace
}  // namespace kvtier
