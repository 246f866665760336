// kvtier-bench calibrate, run as a program: the profile it writes loads
// with LoadProfile, measured fields carry this machine's values and say how
// they were measured, every other field keeps the base profile's value and
// source; bad arguments exit 2 with a message.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "tests/tools/tool_test_util.h"
#include "tools/bench/hw_profile.h"

namespace kvtier::bench {
namespace {

using kvtier::testing::RunResult;
using kvtier::testing::TempDir;

constexpr auto kTimeout = std::chrono::seconds(120);
const std::string kProfiles = DefaultProfileDir();

RunResult Calibrate(const TempDir& tmp, const std::string& gpu, const std::string& out) {
  return kvtier::testing::Run(
      {KVTIER_BENCH_BIN, "calibrate", "--base", "l4-pcie4", "--name", "test-machine", "--dir",
       tmp.path() + "/ssd", "--size", "32M", "--gpu", gpu, "--gpu-size", "64M", "--out", out},
      kTimeout);
}

TEST(Calibrate, WritesAProfileThatLoadsWithThisMachinesFigures) {
  TempDir tmp;
  const std::string out = tmp.path() + "/profile.json";
  RunResult r = Calibrate(tmp, "off", out);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("ssd_write_bps"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("GPU: --gpu off"), std::string::npos) << r.out;

  Result<HardwareProfile> base = LoadProfile("l4-pcie4", kProfiles);
  Result<HardwareProfile> got = LoadProfile(out, kProfiles);
  ASSERT_TRUE(base.ok()) << base.status().message();
  ASSERT_TRUE(got.ok()) << got.status().message();
  const HardwareProfile& b = base.value();
  const HardwareProfile& p = got.value();
  EXPECT_EQ(p.name, "test-machine");
  for (const char* field :
       {"ssd_write_bps", "ssd_read_bps", "ssd_latency_ns", "ssd_bytes", "host_memory_bytes"}) {
    EXPECT_EQ(p.sources.at(field).rfind("measured by kvtier-bench calibrate on ", 0), 0u)
        << field << ": " << p.sources.at(field);
  }
  EXPECT_GT(p.ssd_write_bps, 0);
  EXPECT_GT(p.ssd_read_bps, 0);
  EXPECT_GT(p.ssd_latency_ns, 0);
  EXPECT_NE(p.ssd_write_bps, b.ssd_write_bps);
  EXPECT_NE(p.host_memory_bytes, b.host_memory_bytes);
  // Unmeasured fields: the base's value and source, unchanged.
  EXPECT_EQ(p.gpu_memory_bytes, b.gpu_memory_bytes);
  EXPECT_EQ(p.sources.at("gpu_memory_bytes"), b.sources.at("gpu_memory_bytes"));
  EXPECT_EQ(p.host_link_bps, b.host_link_bps);
  EXPECT_EQ(p.fault_batch_latency_ns, b.fault_batch_latency_ns);
  EXPECT_EQ(p.sources.at("fault_batch_latency_ns"), b.sources.at("fault_batch_latency_ns"));
  EXPECT_EQ(p.prefill_mfu, b.prefill_mfu);
  EXPECT_EQ(p.gpu_memory_utilization, b.gpu_memory_utilization);
}

TEST(Calibrate, MeasuresTheGpuWhereOneAnswers) {
  TempDir tmp;
  const std::string out = tmp.path() + "/profile.json";
  RunResult r = Calibrate(tmp, "auto", out);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  if (r.out.find("GPU: not measured") != std::string::npos) {
    // --gpu on must then fail and say why.
    RunResult on = Calibrate(tmp, "on", out + ".on");
    EXPECT_EQ(on.exit_code, 1) << on.out << on.err;
    EXPECT_NE(on.err.find("--gpu on: not measured"), std::string::npos) << on.err;
    GTEST_SKIP() << "no GPU: " << r.out;
  }
  Result<HardwareProfile> got = LoadProfile(out, kProfiles);
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_GT(got.value().gpu_memory_bytes, 1e9);
  EXPECT_GT(got.value().host_link_bps, 1e9);
  EXPECT_NE(got.value().sources.at("host_link_bps").find("cuMemPrefetchAsync"), std::string::npos);
}

TEST(Calibrate, RefusesBadArgumentsWithExitTwo) {
  TempDir tmp;
  const struct {
    std::vector<std::string> args;
    const char* says;
  } cases[] = {
      {{"--gpu", "maybe"}, "--gpu=maybe: use one of auto, on, off"},
      {{"--size", "1M"}, "--size=1M: at least 32 MiB"},
      {{"--size", "lots"}, "--size=lots"},
      {{"--base", "no-such-profile"}, "--base"},
      {{"--frobnicate", "1"}, "unknown option --frobnicate"},
      {{"--out"}, "--out needs a value"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> argv = {KVTIER_BENCH_BIN, "calibrate", "--dir", tmp.path()};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    RunResult r = kvtier::testing::Run(argv, kTimeout);
    EXPECT_EQ(r.exit_code, 2) << c.says << "\n" << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace kvtier::bench
