// TickSchedule on hand-set times: the runtime's policy thread and
// kvtier-bench's VirtualTicker tick by it.
#include "runtime/tick_schedule.h"

#include <gtest/gtest.h>

namespace kvtier {
namespace {

constexpr uint64_t kMs = 1'000'000;

TEST(TickSchedule, TicksEveryPeriodFromItsStart) {
  TickSchedule s(10 * kMs, 5 * kMs);
  EXPECT_EQ(s.DueAt(), 15 * kMs);
  EXPECT_FALSE(s.Start(15 * kMs));
  EXPECT_EQ(s.DueAt(), 25 * kMs);
  EXPECT_FALSE(s.Start(27 * kMs));  // a little late: the grid stays
  EXPECT_EQ(s.DueAt(), 35 * kMs);
}

TEST(TickSchedule, ATickLateByMoreThanAPeriodIsFollowedByOneCatchUpNotABurst) {
  TickSchedule s(10 * kMs, 0);
  EXPECT_FALSE(s.Start(55 * kMs));  // due at 10: five periods late
  EXPECT_EQ(s.DueAt(), 55 * kMs);   // one more at once...
  EXPECT_FALSE(s.Start(56 * kMs));
  EXPECT_EQ(s.DueAt(), 65 * kMs);  // ...then a period after it, not four more
}

TEST(TickSchedule, AnEarlyTickWaitsAFifthOfAPeriodAfterTheLastStart) {
  TickSchedule s(10 * kMs, 0);
  EXPECT_EQ(s.min_gap_ns(), 2 * kMs);
  ASSERT_FALSE(s.Start(10 * kMs));
  s.AskEarly();
  EXPECT_TRUE(s.early_asked());
  EXPECT_EQ(s.DueAt(), 12 * kMs);
  EXPECT_EQ(s.EarlyAt(11 * kMs), 12 * kMs);
  EXPECT_EQ(s.EarlyAt(15 * kMs), 15 * kMs);
  EXPECT_TRUE(s.Start(15 * kMs));
  EXPECT_FALSE(s.early_asked());
  EXPECT_EQ(s.DueAt(), 20 * kMs);  // the periodic tick keeps its time
}

TEST(TickSchedule, AnEarlyTickNeverComesAfterThePeriodicOne) {
  TickSchedule s(10 * kMs, 0);
  ASSERT_FALSE(s.Start(10 * kMs));
  ASSERT_TRUE(s.Start(19 * kMs));  // an early one just before the periodic
  s.AskEarly();
  EXPECT_EQ(s.DueAt(), 20 * kMs);  // not 19 + 2
}

TEST(TickSchedule, ABurstOfEarlyTicksLeavesThePeriodicOnesInPlace) {
  TickSchedule s(50 * kMs, 0);
  uint64_t now = 0;
  for (int i = 0; i < 20; ++i) {
    s.AskEarly();
    now = s.DueAt();
    if (now >= 50 * kMs) break;
    EXPECT_TRUE(s.Start(now)) << i;
  }
  EXPECT_EQ(now, 50 * kMs);  // 10 ms apart, four of them, then the periodic one
  EXPECT_FALSE(s.Start(now));
  EXPECT_EQ(s.DueAt(), 100 * kMs);
}

TEST(TickSchedule, TheGapIsAtLeastAMillisecondAndAPeriodAtLeastANanosecond) {
  EXPECT_EQ(TickSchedule(2 * kMs, 0).min_gap_ns(), kMs);
  TickSchedule zero(0, 7);
  EXPECT_EQ(zero.period_ns(), 1u);
  EXPECT_EQ(zero.DueAt(), 8u);
}

}  // namespace
}  // namespace kvtier
