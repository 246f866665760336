// Workload: LMBenchmark's request pattern (gaps, joins, ramp-up, prompt
// growth, no two requests of one user in flight, the measured window).
#include "tools/bench/workload.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace kvtier::bench {
namespace {

WorkloadConfig Small() {
  WorkloadConfig c;
  c.num_users = 2;
  c.qps = 1;         // a user every 2 s
  c.num_rounds = 3;  // sessions of 4 s; a join every 2 s
  c.shared_system_prompt = 10;
  c.user_history_prompt = 100;
  c.answer_len = 5;
  c.question_len = 20;
  c.warmup_s = 0;
  c.time_s = 10;
  return c;
}

std::vector<Launch> AdvanceTo(Workload& w, double t) {
  std::vector<Launch> out;
  while (w.NextEventTime() <= t) w.Advance(w.NextEventTime(), &out);
  return out;
}

TEST(Workload, RampUpJoinsGapsAndPromptGrowth) {
  Workload w(Small());
  EXPECT_DOUBLE_EQ(w.gap_between_requests(), 2.0);
  // t=0: a user joins and asks its first question (system + history + question).
  std::vector<Launch> l = AdvanceTo(w, 0);
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].user_id, 2);  // ramp-up sessions took ids 0 and 1
  EXPECT_EQ(l[0].question_id, 1);
  EXPECT_EQ(l[0].prompt_tokens, 130);
  EXPECT_TRUE(l[0].measured);
  EXPECT_FALSE(l[0].returning);  // the server has not answered this user yet
  const int joined = l[0].session;
  w.OnFinish(joined, 1.0);
  // Next tick after one gap (strictly more than 2 s later): the ramped-up user
  // 1 (two rounds in; its first prompt carries no earlier answers), user 2's
  // second round (+ answer + question), and a new user.
  l = AdvanceTo(w, 2.1);
  ASSERT_EQ(l.size(), 3u);
  for (const Launch& x : l) EXPECT_NEAR(x.time_s, 2.1, 1e-9);
  EXPECT_EQ(l[0].user_id, 1);
  EXPECT_EQ(l[0].question_id, 3);
  EXPECT_EQ(l[0].prompt_tokens, 130);
  EXPECT_FALSE(l[0].returning);  // two rounds in, but its first request in this run
  EXPECT_EQ(l[1].user_id, 2);
  EXPECT_EQ(l[1].prompt_tokens, 130 + 5 + 20);
  EXPECT_TRUE(l[1].returning);
  EXPECT_EQ(l[2].user_id, 3);
  EXPECT_FALSE(l[2].returning);
  EXPECT_EQ(w.late_launches(), 0);
}

TEST(Workload, AUserWaitsForItsAnswerAndLaunchesOnTheNextTick) {
  Workload w(Small());
  std::vector<Launch> l = AdvanceTo(w, 0);
  const int s = l[0].session;
  EXPECT_DOUBLE_EQ(w.NextUse(s, 0.5), 0.5);  // in flight: it needs its KV now
  l = AdvanceTo(w, 3.0);                     // still unfinished at its due time
  for (const Launch& x : l) EXPECT_NE(x.session, s);
  w.OnFinish(s, 3.05);
  EXPECT_NEAR(w.NextUse(s, 3.05), 3.1, 1e-9);
  l = AdvanceTo(w, 3.1);
  ASSERT_FALSE(l.empty());
  EXPECT_EQ(l.back().session, s);
  EXPECT_NEAR(l.back().time_s, 3.1, 1e-9);
  EXPECT_EQ(w.late_launches(), 1);
}

TEST(Workload, MeasuredWindowAndEnd) {
  WorkloadConfig c = Small();
  c.warmup_s = 2;
  c.time_s = 2;
  Workload w(c);
  std::vector<Launch> all;
  for (;;) {
    double t = w.NextEventTime();
    if (t == Workload::kNever) break;
    std::vector<Launch> l;
    w.Advance(t, &l);
    for (const Launch& x : l) {
      w.OnFinish(x.session, t);
      all.push_back(x);
    }
  }
  ASSERT_FALSE(all.empty());
  for (const Launch& x : all) {
    EXPECT_LE(x.time_s, 4.0 + 1e-9);
    EXPECT_EQ(x.measured, x.time_s >= 2.0 - 1e-9) << x.time_s;
  }
  // Sessions end after num_rounds requests.
  EXPECT_EQ(w.NextUse(all.front().session, 100), Workload::kNever);
}

TEST(Workload, RateMatchesQps) {
  WorkloadConfig c;
  c.num_users = 15;
  c.qps = 0.1;
  c.time_s = 3000;
  c.warmup_s = 0;
  Workload w(c);
  int n = 0;
  for (;;) {
    double t = w.NextEventTime();
    if (t == Workload::kNever) break;
    std::vector<Launch> l;
    w.Advance(t, &l);
    for (const Launch& x : l) {
      w.OnFinish(x.session, t + 1);  // answered within a second
      ++n;
    }
  }
  // One request per 10 s, plus the first requests of joining users (one per
  // 190 s) riding on the same schedule.
  EXPECT_NEAR(n, 300, 20);
}

}  // namespace
}  // namespace kvtier::bench
