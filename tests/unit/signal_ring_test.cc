// SignalRing: ordering, full/empty, and concurrent producers with one consumer.
#include "runtime/signal_ring.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace kvtier {
namespace {

TEST(SignalRing, RoundsCapacityUpToPowerOfTwo) {
  EXPECT_EQ(SignalRing(5).capacity(), 8u);
  EXPECT_EQ(SignalRing(64).capacity(), 64u);
}

TEST(SignalRing, FifoAndFullAndEmpty) {
  SignalRing ring(4);
  Signal out;
  EXPECT_FALSE(ring.TryPop(&out));
  for (uint32_t i = 0; i < 4; ++i) EXPECT_TRUE(ring.TryPush({SignalKind::kFault, 1, i, 1, i}));
  EXPECT_FALSE(ring.TryPush({SignalKind::kFault, 1, 99, 1, 0})) << "a full ring must refuse";
  for (uint32_t i = 0; i < 4; ++i) {
    ASSERT_TRUE(ring.TryPop(&out));
    EXPECT_EQ(out.page, i);
  }
  EXPECT_FALSE(ring.TryPop(&out));
  // Wraps around for many laps.
  for (uint32_t i = 0; i < 1000; ++i) {
    ASSERT_TRUE(ring.TryPush({SignalKind::kLaunch, 2, i, 1, 0}));
    ASSERT_TRUE(ring.TryPop(&out));
    ASSERT_EQ(out.page, i);
  }
}

// Four producers push disjoint sequences while one consumer drains: every
// signal arrives exactly once, and each producer's signals arrive in order.
TEST(SignalRing, ConcurrentProducersLoseNothingAndKeepPerProducerOrder) {
  constexpr int kProducers = 4;
  constexpr uint32_t kPerProducer = 200000;
  SignalRing ring(1024);
  std::atomic<bool> go{false};
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      while (!go.load()) {
      }
      for (uint32_t i = 0; i < kPerProducer; ++i) {
        Signal s{SignalKind::kFault, static_cast<RegionId>(p), i, 1, 0};
        while (!ring.TryPush(s)) std::this_thread::yield();
      }
    });
  }
  std::vector<uint32_t> next(kProducers, 0);
  go.store(true);
  uint64_t received = 0;
  while (received < uint64_t{kProducers} * kPerProducer) {
    Signal s;
    if (!ring.TryPop(&s)) {
      std::this_thread::yield();
      continue;
    }
    ASSERT_LT(s.region, static_cast<RegionId>(kProducers));
    ASSERT_EQ(s.page, next[s.region]) << "producer " << s.region << " out of order";
    ++next[s.region];
    ++received;
  }
  for (auto& t : producers) t.join();
  Signal extra;
  EXPECT_FALSE(ring.TryPop(&extra));
  for (int p = 0; p < kProducers; ++p) EXPECT_EQ(next[p], kPerProducer);
}

}  // namespace
}  // namespace kvtier
