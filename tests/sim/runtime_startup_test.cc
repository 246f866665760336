// Runtime::Create's failure paths: a step that fails part way gives an error
// and a runtime that is destroyed without touching the parts never made; a
// disk directory that cannot be used costs only the disk tier. Every fallible
// step of start-up fails in turn through the start-step seam (start_step.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "runtime/options.h"
#include "runtime/runtime.h"
#include "start/bootstrap.h"
#include "tests/sim/sim_test_util.h"
#include "tests/storage/storage_test_util.h"

namespace kvtier::testing {
namespace {

using RuntimeStartupTest = SimDeviceTest;  // its SetUp skips without userfaultfd

Result<Options> MakeOptions(std::map<std::string, std::string> values) {
  values.emplace("KVTIER_DEVICE_BUDGET", "1M");
  values.emplace("KVTIER_HOST_BUDGET", "16M");
  values.emplace("KVTIER_PAGE_SIZE", "64K");
  values.emplace("KVTIER_STATS", "0");
  return ParseOptions([&](const char* name) -> const char* {
    auto it = values.find(name);
    return it == values.end() ? nullptr : it->second.c_str();
  });
}

TEST_F(RuntimeStartupTest, ADeviceThatCannotBeMadeFailsCreateAndPrintsNoSummary) {
  Result<Options> options = MakeOptions({{"KVTIER_SHOW_STATS", "1"}});
  ASSERT_TRUE(options.ok()) << options.status().message();
  Runtime::DeviceFactory factory =
      [](const Runtime::DeviceContext&) -> Result<std::unique_ptr<Device>> {
    return Status::Errorf("injected: no device");
  };
  ::testing::internal::CaptureStderr();
  Runtime::Parts parts = SimParts();
  parts.device = factory;
  Result<std::unique_ptr<Runtime>> made = Runtime::Create(options.value(), std::move(parts));
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_FALSE(made.ok());
  EXPECT_NE(made.status().message().find("injected: no device"), std::string::npos)
      << made.status().message();
  EXPECT_EQ(err.find("kvtier summary"), std::string::npos) << err;
}

TEST_F(RuntimeStartupTest, AnUnknownPolicyFailsCreateNamingIt) {
  Result<Options> options = MakeOptions({{"KVTIER_SHOW_STATS", "1"}});
  ASSERT_TRUE(options.ok()) << options.status().message();
  Options o = options.value();
  o.policy = "no-such-policy";
  Result<std::unique_ptr<Runtime>> made = Runtime::Create(o, SimParts());
  ASSERT_FALSE(made.ok());
  EXPECT_NE(made.status().message().find("no-such-policy"), std::string::npos);
}

TEST_F(RuntimeStartupTest, WithoutAPolicyFactoryCreateFailsSayingSo) {
  // The runtime knows policies only through the factory its maker passes.
  Result<Options> options = MakeOptions({});
  ASSERT_TRUE(options.ok()) << options.status().message();
  Result<std::unique_ptr<Runtime>> made = Runtime::Create(options.value(), {});
  ASSERT_FALSE(made.ok());
  EXPECT_NE(made.status().message().find("no policy factory"), std::string::npos)
      << made.status().message();
}

TEST_F(RuntimeStartupTest, WithoutADeviceFactoryCreateFailsSayingSo) {
  // Nor is there a default device: start-up (bootstrap.h) makes it.
  Result<Options> options = MakeOptions({});
  ASSERT_TRUE(options.ok()) << options.status().message();
  Runtime::Parts parts = SimParts();
  parts.device = nullptr;
  Result<std::unique_ptr<Runtime>> made = Runtime::Create(options.value(), std::move(parts));
  ASSERT_FALSE(made.ok());
  EXPECT_NE(made.status().message().find("no device factory"), std::string::npos)
      << made.status().message();
}

TEST_F(RuntimeStartupTest, AnUnusableDiskDirectoryLeavesTheRuntimeWithoutADiskTier) {
  Result<Options> options = MakeOptions({{"KVTIER_DISK_BUDGET", "16M"},
                                         {"KVTIER_DISK_DIR", "/proc/kvtier-no-such-dir"},
                                         {"KVTIER_SHOW_STATS", "1"}});
  ASSERT_TRUE(options.ok()) << options.status().message();
  ::testing::internal::CaptureStderr();
  Result<std::unique_ptr<Runtime>> made = Runtime::Create(options.value(), SimParts());
  std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(made.ok()) << made.status().message();
  EXPECT_NE(err.find("no disk tier: KVTIER_DISK_DIR=/proc/kvtier-no-such-dir"), std::string::npos)
      << err;
  Runtime& rt = *made.value();
  EXPECT_EQ(Counters::Get(rt.counters().disk_budget_bytes), 0u);
  // The device and host tiers still work: 4 MiB on a 1 MiB device.
  constexpr size_t kBytes = 4 << 20;
  Result<void*> base = rt.CreateRegion(kBytes, nullptr);
  ASSERT_TRUE(base.ok()) << base.status().message();
  auto* bytes = static_cast<uint8_t*>(base.value());
  for (size_t i = 0; i < kBytes; i += 4096) bytes[i] = static_cast<uint8_t>(i >> 12);
  for (size_t i = 0; i < kBytes; i += 4096) ASSERT_EQ(bytes[i], static_cast<uint8_t>(i >> 12));
  EXPECT_TRUE(rt.FreeRegion(base.value()));
  ::testing::internal::CaptureStderr();
  made.value().reset();
  err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("kvtier summary"), std::string::npos) << err;
  EXPECT_EQ(err.find("disk tier  "), std::string::npos) << err;
}

size_t CountLines(const std::string& text, const std::string& needle) {
  size_t n = 0;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    if (text.substr(begin, end - begin).find(needle) != std::string::npos) ++n;
    begin = end + 1;
  }
  return n;
}

// Writes a pattern over 4 MiB (64 pages on a 16-page device, so pages move),
// reads it back and frees the region.
void UseTheRuntime(Runtime& rt) {
  constexpr size_t kBytes = 4 << 20;
  Result<void*> base = rt.CreateRegion(kBytes, nullptr);
  ASSERT_TRUE(base.ok()) << base.status().message();
  auto* bytes = static_cast<uint8_t*>(base.value());
  for (size_t i = 0; i < kBytes; i += 4096) bytes[i] = static_cast<uint8_t>(i >> 12);
  rt.Tick();
  for (size_t i = 0; i < kBytes; i += 4096) ASSERT_EQ(bytes[i], static_cast<uint8_t>(i >> 12));
  EXPECT_TRUE(rt.FreeRegion(base.value()));
}

TEST_F(RuntimeStartupTest, EveryStartStepFailsInTurnWithOneMessageAndNoHalfBuiltRuntime) {
  storage_test::TempDir disk, stats;
  ASSERT_TRUE(disk.ok() && stats.ok());
  Result<Options> options = MakeOptions({{"KVTIER_DISK_BUDGET", "16M"},
                                         {"KVTIER_DISK_DIR", disk.path()},
                                         {"KVTIER_STATS", "1"},
                                         {"KVTIER_STATS_DIR", stats.path()},
                                         {"KVTIER_SIM_FAULT_THREADS", "2"},
                                         {"KVTIER_SHOW_STATS", "1"}});
  ASSERT_TRUE(options.ok()) << options.status().message();

  // The steps a start takes, asked of the seam in order: a step added later
  // is failed below without a change here.
  std::vector<std::string> steps;
  {
    Runtime::Parts parts = SimParts();
    parts.check_step = [&](const char* step) {
      steps.emplace_back(step);
      return Status::Ok();
    };
    ::testing::internal::CaptureStderr();
    Result<std::unique_ptr<Runtime>> made = Runtime::Create(options.value(), std::move(parts));
    ASSERT_TRUE(made.ok()) << made.status().message();
    made.value().reset();
    (void)::testing::internal::GetCapturedStderr();
  }
  const std::set<std::string> taken(steps.begin(), steps.end());
  EXPECT_EQ(taken.size(), steps.size()) << "a step is asked twice";
  for (const char* step : {"policy", "device", "disk tier", "userfaultfd", "eventfd",
                           "fault epoll sets", "fault threads", "stats segment", "policy thread"}) {
    EXPECT_TRUE(taken.count(step)) << "start-up no longer asks about \"" << step << "\"";
  }
  // What kvtier can run without: the disk tier and the stats segment.
  const std::set<std::string> optional = {"disk tier", "stats segment"};

  for (const std::string& failing : steps) {
    SCOPED_TRACE("failing step: " + failing);
    const std::string why = "injected failure of " + failing;
    Runtime::Parts parts = SimParts();
    parts.check_step = [&](const char* step) {
      return failing == step ? Status::Error(why) : Status::Ok();
    };
    ::testing::internal::CaptureStderr();
    Result<std::unique_ptr<Runtime>> made = Runtime::Create(options.value(), std::move(parts));
    std::string err = ::testing::internal::GetCapturedStderr();
    if (!optional.count(failing)) {
      // An error for the caller to print (ProcessRuntime prints one line); no
      // output of Create's own, and no summary of a runtime that never ran.
      ASSERT_FALSE(made.ok());
      EXPECT_NE(made.status().message().find(why), std::string::npos) << made.status().message();
      EXPECT_EQ(err, "");
      continue;
    }
    // One warning naming the cause, and a runtime that works without the part.
    ASSERT_TRUE(made.ok()) << made.status().message();
    EXPECT_EQ(CountLines(err, why), 1u) << err;
    EXPECT_EQ(CountLines(err, "kvtier"), 1u) << err;
    Runtime& rt = *made.value();
    UseTheRuntime(rt);
    if (HasFatalFailure()) return;
    if (failing == "disk tier") {
      EXPECT_EQ(Counters::Get(rt.counters().disk_budget_bytes), 0u);
    }
    ::testing::internal::CaptureStderr();
    made.value().reset();
    err = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find("kvtier summary"), std::string::npos) << err;
  }
  // Nothing is left behind by any of the starts: spill files are unlinked at
  // once, and every stats segment was removed.
  EXPECT_EQ(stats.Entries(), std::vector<std::string>{});
}

}  // namespace
}  // namespace kvtier::testing
