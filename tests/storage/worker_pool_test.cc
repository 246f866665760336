// Tests of WorkerPool: every piece runs once, pieces run at once on the
// caller and the helpers, a second caller works alone instead of waiting,
// and a pool without helpers runs everything on the caller.
#include "runtime/storage/worker_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace kvtier {
namespace {

// Every wait below ends long before this unless the pool is broken.
constexpr auto kDeadline = std::chrono::seconds(20);

TEST(WorkerPoolTest, EveryPieceRunsOnce) {
  WorkerPool pool(3);
  EXPECT_EQ(pool.width(), 4u);
  for (size_t n : {0, 1, 2, 7, 1000}) {
    std::vector<std::atomic<int>> calls(n);
    pool.Run(n, [&](size_t i) { calls[i].fetch_add(1); });
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(calls[i].load(), 1) << "n " << n << " piece " << i;
  }
}

TEST(WorkerPoolTest, PiecesRunAtOnceOnTheCallerAndTheHelpers) {
  WorkerPool pool(1);
  // Piece 0 waits until piece 1 has started: only a second thread can start
  // it while the first is held in piece 0.
  std::mutex mu;
  std::condition_variable cv;
  bool second_started = false;
  std::set<std::thread::id> threads;
  bool in_time = true;
  pool.Run(2, [&](size_t i) {
    std::unique_lock<std::mutex> lock(mu);
    threads.insert(std::this_thread::get_id());
    if (i == 1) {
      second_started = true;
      cv.notify_all();
    } else {
      in_time = cv.wait_for(lock, kDeadline, [&] { return second_started; });
    }
  });
  EXPECT_TRUE(in_time) << "the second piece never started while the first ran";
  EXPECT_EQ(threads.size(), 2u);
}

TEST(WorkerPoolTest, ASecondCallerWorksAloneInsteadOfWaiting) {
  WorkerPool pool(2);
  std::mutex mu;
  std::condition_variable cv;
  bool first_in_job = false, second_done = false;
  std::set<std::thread::id> second_threads;
  bool first_in_time = true, second_in_time = true;
  std::thread first([&] {
    // Holds the pool until the second caller's job is done.
    pool.Run(3, [&](size_t i) {
      if (i != 0) return;
      std::unique_lock<std::mutex> lock(mu);
      first_in_job = true;
      cv.notify_all();
      first_in_time = cv.wait_for(lock, kDeadline, [&] { return second_done; });
    });
  });
  std::thread::id second_caller;
  std::thread second([&] {
    second_caller = std::this_thread::get_id();
    {
      std::unique_lock<std::mutex> lock(mu);
      second_in_time = cv.wait_for(lock, kDeadline, [&] { return first_in_job; });
    }
    std::vector<std::atomic<int>> calls(50);
    pool.Run(50, [&](size_t i) {
      calls[i].fetch_add(1);
      std::lock_guard<std::mutex> lock(mu);
      second_threads.insert(std::this_thread::get_id());
    });
    for (auto& c : calls) EXPECT_EQ(c.load(), 1);
    std::lock_guard<std::mutex> lock(mu);
    second_done = true;
    cv.notify_all();
  });
  second.join();
  first.join();
  EXPECT_TRUE(second_in_time);
  EXPECT_TRUE(first_in_time) << "the second caller waited for the first job";
  ASSERT_EQ(second_threads.size(), 1u) << "the second job borrowed the first job's helpers";
  EXPECT_EQ(*second_threads.begin(), second_caller);
}

TEST(WorkerPoolTest, WithoutHelpersTheCallerRunsEverything) {
  WorkerPool pool(0);
  EXPECT_EQ(pool.width(), 1u);
  std::set<std::thread::id> threads;
  pool.Run(20, [&](size_t) { threads.insert(std::this_thread::get_id()); });
  ASSERT_EQ(threads.size(), 1u);
  EXPECT_EQ(*threads.begin(), std::this_thread::get_id());
}

}  // namespace
}  // namespace kvtier
