// EngineModel: prefix caching, vLLM's eviction order, chunked prefill, step
// costs and preemption, on the hbm-only backend.
#include "tools/bench/engine_model.h"

#include <gtest/gtest.h>

#include "tools/bench/kv_backends.h"

namespace kvtier::bench {
namespace {

EngineConfig Config() {
  EngineConfig c;
  c.shape = FindModelShape("llama-3.1-8b").value();
  c.block_tokens = 16;
  c.max_batched_tokens = 8192;
  c.prefill_flops = 400e12;
  c.hbm_bps = 4e12;
  c.step_overhead_s = 0.001;
  return c;
}

Launch L(int session, int prompt, int answer, double t) {
  Launch l;
  l.session = session;
  l.user_id = session;
  l.question_id = 1;
  l.prompt_tokens = prompt;
  l.answer_tokens = answer;
  l.time_s = t;
  l.measured = true;
  return l;
}

// Runs the engine until it is idle; returns the finished requests in order.
std::vector<Request*> Drain(EngineModel& e) {
  std::vector<Request*> done;
  while (e.NextStepTime() != Workload::kNever) e.Step(e.NextStepTime(), &done);
  return done;
}

TEST(EngineModel, ColdPrefillIsChunkedAndCostsTheRoofline) {
  const EngineConfig c = Config();
  HbmBackend b(c, 10000);
  EngineModel e(c, &b, 0);
  e.Submit(L(0, 20000, 1, 0));
  std::vector<Request*> done = Drain(e);
  ASSERT_EQ(done.size(), 1u);
  // Three chunks (8192, 8192, 3616), each a step: overhead + max(flops, bytes).
  double expected = 0;
  const int chunks[][2] = {{8192, 0}, {8192, 8192}, {3616, 16384}};
  for (const auto& ch : chunks) {
    expected += c.step_overhead_s + e.ComputeSeconds({{nullptr, ch[0], ch[1], true}});
  }
  EXPECT_NEAR(done[0]->first_token_s, expected, 1e-9);
  EXPECT_EQ(done[0]->finish_s, done[0]->first_token_s);  // one output token
  EXPECT_EQ(done[0]->recomputed, 20000);
  // Roughly 2 x params x tokens of FLOPs plus attention at 400 TFLOP/s.
  EXPECT_NEAR(expected, (2 * 8.03e9 * 20000 + 4.0 * 32 * 4096 * 20000 * 10000) / 400e12, 0.05);
}

TEST(EngineModel, ReturningSessionHitsItsHistoryAndTheSharedPrefix) {
  const EngineConfig c = Config();
  HbmBackend b(c, 10000);
  EngineModel e(c, &b, 1000);
  e.Submit(L(0, 3000, 10, 0));
  Drain(e);
  // Round 2: history (3000 + 10) + question; full blocks of the 3009 tokens
  // with KV (the last answer token has none) are hits.
  e.Submit(L(0, 3030, 10, 100));
  e.Submit(L(1, 3000, 10, 100));  // another user: the shared system prompt only
  std::vector<Request*> done = Drain(e);
  ASSERT_EQ(done.size(), 2u);
  const Request* again = done[0]->session == 0 ? done[0] : done[1];
  const Request* other = done[0]->session == 1 ? done[0] : done[1];
  EXPECT_EQ(again->hit_device, 3008 / 16 * 16);
  EXPECT_EQ(again->recomputed, 3030 - 3008);
  EXPECT_EQ(other->hit_device, 1000 / 16 * 16);
}

TEST(EngineModel, EvictsLeastRecentlyFreedAndAHistoryFromItsEnd) {
  const EngineConfig c = Config();
  HbmBackend b(c, 300);  // 4800 tokens
  EngineModel e(c, &b, 0);
  e.Submit(L(0, 3200, 1, 0));  // 200 blocks, freed
  Drain(e);
  e.Submit(L(1, 3200, 1, 10));  // needs 200: takes the 100 never used, then 100 of session 0's
  Drain(e);
  e.Submit(L(0, 3300, 1, 20));
  std::vector<Request*> done = Drain(e);
  // Session 0 lost the end of its history, not the start.
  EXPECT_EQ(done[0]->hit_device, 100 * 16);
}

TEST(EngineModel, PreemptsWhenBlocksRunOutAndStillFinishesEverything) {
  EngineConfig c = Config();
  c.max_batched_tokens = 512;
  HbmBackend b(c, 100);  // 1600 tokens: two 700-token requests cannot both decode long
  EngineModel e(c, &b, 0);
  e.Submit(L(0, 700, 200, 0));
  e.Submit(L(1, 700, 200, 0));
  std::vector<Request*> done = Drain(e);
  ASSERT_EQ(done.size(), 2u);
  EXPECT_GT(e.preemptions(), 0);
  for (const Request* r : done) {
    EXPECT_EQ(r->generated, 200);
    EXPECT_GT(r->first_token_s, 0);
  }
}

TEST(EngineModel, RunningKvLimitAdmitsOneLongRequestAtATime) {
  EngineConfig c = Config();
  c.running_kv_limit_tokens = 1000;
  HbmBackend b(c, 10000);
  EngineModel e(c, &b, 0);
  e.Submit(L(0, 800, 5, 0));
  e.Submit(L(1, 800, 5, 0));
  std::vector<Request*> done = Drain(e);
  ASSERT_EQ(done.size(), 2u);
  EXPECT_GE(done[1]->first_token_s, done[0]->finish_s);  // waited for the first
}

}  // namespace
}  // namespace kvtier::bench
