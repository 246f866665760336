// Hardware profiles: every shipped profile loads and names a source for every
// number; a profile without a source is refused; and the cost model against
// the published L4 anchor (LMCache docs demo, Llama-3.1-8B, 15,376 tokens):
// 6.314 s without a cache (what prefill_mfu was derived from) and 0.148 s when
// the KV is loaded from the CPU, which nothing was fitted to.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "tools/bench/engine_model.h"
#include "tools/bench/hw_profile.h"
#include "tools/bench/kv_backends.h"

namespace kvtier::bench {
namespace {

const std::string kDir = std::string(KVTIER_SOURCE_DIR) + "/tools/profiles";

TEST(Profiles, EveryShippedProfileLoads) {
  for (const char* name : {"h200-pcie5", "h100-pcie5", "l4-pcie4", "gh200-c2c", "h200-measured"}) {
    SCOPED_TRACE(name);
    Result<HardwareProfile> p = LoadProfile(name, kDir);
    ASSERT_TRUE(p.ok()) << p.status().message();
    EXPECT_EQ(p.value().name, name);
    EXPECT_GT(p.value().gpu_memory_bytes, 1e10);
    EXPECT_LT(p.value().fault_migration_bps, p.value().host_link_bps);
  }
}

TEST(Profiles, ANumberWithoutASourceIsRefused) {
  std::ifstream in(kDir + "/l4-pcie4.json");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string needle = "\"source\": ";
  size_t at = text.find("\"ssd_read_bps\"");
  ASSERT_NE(at, std::string::npos);
  at = text.find(needle, at);
  text.replace(at, needle.size(), "\"note\": ");
  const std::string path = ::testing::TempDir() + "/no-source.json";
  std::ofstream(path) << text;
  Result<HardwareProfile> p = LoadProfile(path, kDir);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("ssd_read_bps"), std::string::npos);
  EXPECT_FALSE(LoadProfile("no-such-gpu", kDir).ok());
}

TEST(Profiles, ModelShapesGiveTheirKvPerToken) {
  EXPECT_EQ(FindModelShape("llama-3.1-8b").value().KvBytesPerToken(1), 128 * 1024);
  EXPECT_EQ(FindModelShape("llama-3.1-70b").value().KvBytesPerToken(8), 40 * 1024);
  EXPECT_EQ(FindModelShape("qwen2.5-7b").value().KvBytesPerToken(1), 56 * 1024);
  EXPECT_FALSE(FindModelShape("gpt-2").ok());
}

TEST(Profiles, L4AnchorColdAndLoadedFromCpu) {
  const HardwareProfile p = LoadProfile("l4-pcie4", kDir).value();
  EngineConfig c;
  c.shape = FindModelShape("llama-3.1-8b").value();
  c.prefill_flops = p.dense_bf16_flops * p.prefill_mfu;
  c.hbm_bps = p.gpu_memory_bandwidth_bps;
  c.step_overhead_s = p.step_overhead_ns / 1e9;
  OffloadConfig oc;
  oc.cpu_bytes = 64ull << 30;
  oc.link_bps = p.host_link_bps;
  OffloadBackend b(c, 2000, oc);
  EngineModel e(c, &b, 0);
  Launch l;
  l.prompt_tokens = 15376;
  l.answer_tokens = 1;
  e.Submit(l);
  std::vector<Request*> done;
  while (e.NextStepTime() != Workload::kNever) e.Step(e.NextStepTime(), &done);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_NEAR(done[0]->first_token_s, 6.314, 6.314 * 0.05);
  ::testing::Test::RecordProperty("cold_ttft_ms", static_cast<int>(done[0]->first_token_s * 1000));
  // The same prompt again after the HBM copy is gone: loaded from the CPU store.
  EngineModel e2(c, &b, 0);
  l.time_s = 100;
  e2.Submit(l);
  done.clear();
  while (e2.NextStepTime() != Workload::kNever) e2.Step(e2.NextStepTime(), &done);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_GT(done[0]->hit_host, 15000);
  EXPECT_NEAR(done[0]->first_token_s - 100, 0.148, 0.148 * 0.25);
  ::testing::Test::RecordProperty("loaded_ttft_ms",
                                  static_cast<int>((done[0]->first_token_s - 100) * 1000));
}

}  // namespace
}  // namespace kvtier::bench
