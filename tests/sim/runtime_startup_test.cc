// Runtime::Create's failure paths: a step that fails part way gives an error
// and a runtime that is destroyed without touching the parts never made; a
// disk directory that cannot be used costs only the disk tier.
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "runtime/options.h"
#include "runtime/runtime.h"
#include "tests/sim/sim_test_util.h"

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
  Runtime::DeviceFactory factory = [](DeviceEvents*, Counters*) -> Result<std::unique_ptr<Device>> {
    return Status::Errorf("injected: no device");
  };
  ::testing::internal::CaptureStderr();
  Result<std::unique_ptr<Runtime>> made = Runtime::Create(options.value(), {.device = factory});
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
  Result<std::unique_ptr<Runtime>> made = Runtime::Create(o, {});
  ASSERT_FALSE(made.ok());
  EXPECT_NE(made.status().message().find("no-such-policy"), std::string::npos);
}

TEST_F(RuntimeStartupTest, AnUnusableDiskDirectoryLeavesTheRuntimeWithoutADiskTier) {
  Result<Options> options = MakeOptions({{"KVTIER_DISK_BUDGET", "16M"},
                                         {"KVTIER_DISK_DIR", "/proc/kvtier-no-such-dir"},
                                         {"KVTIER_SHOW_STATS", "1"}});
  ASSERT_TRUE(options.ok()) << options.status().message();
  ::testing::internal::CaptureStderr();
  Result<std::unique_ptr<Runtime>> made = Runtime::Create(options.value(), {});
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

}  // namespace
}  // namespace kvtier::testing
