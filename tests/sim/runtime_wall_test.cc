// A host-backend runtime on the automatic budget (KVTIER_HOST_BUDGET unset)
// follows its memory wall, given as a fake cgroup tree: it starts within the
// wall, shrinks when the wall comes down (its pages leave for SSD, every
// byte intact), says so in its counters and summary; and a fixed budget
// above the wall is capped to it.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <string>
#include <thread>

#include "runtime/runtime.h"
#include "runtime/storage/env.h"
#include "tests/sim/host_runtime_util.h"
#include "tests/sim/sim_disk_test_util.h"
#include "tests/testing/wall_tree.h"

namespace kvtier::testing {
namespace {

uint64_t Budget(Runtime& rt) {
  return Counters::Get(rt.counters().device_budget_bytes) +
         Counters::Get(rt.counters().host_budget_bytes);
}
uint64_t InMemory(Runtime& rt) {
  return Counters::Get(rt.counters().device_used_bytes) +
         Counters::Get(rt.counters().host_used_bytes);
}

TEST_F(SimDiskTest, TheAutomaticBudgetFollowsAWallThatComesDown) {
  storage_test::TempDir stats_dir("/dev/shm");
  ASSERT_TRUE(stats_dir.ok());
  std::map<std::string, std::string> values = SpillingHostValues(dir_.path(), stats_dir.path());
  values.erase("KVTIER_HOST_BUDGET");
  FakeTree wall;
  wall.Machine();
  wall.V2("/pod");
  wall.V2Level("/pod", std::to_string(96 * kMiB), "max", 0);

  Result<std::unique_ptr<Runtime>> made = MakeHostRuntime(values, wall.root());
  ASSERT_TRUE(made.ok()) << made.status().message();
  Runtime& rt = *made.value();
  const uint64_t first = Budget(rt);
  EXPECT_LE(first, 96 * kMiB - 4 * kMiB);  // the headroom at least
  EXPECT_GE(first, 48 * kMiB);
  EXPECT_EQ(Counters::Get(rt.counters().wall_bytes), 96 * kMiB);
  EXPECT_EQ(Counters::Get(rt.counters().wall_source), 3u);

  constexpr size_t kBytes = 40 * kMiB;
  Result<void*> base = rt.CreateRegion(kBytes, nullptr);
  ASSERT_TRUE(base.ok()) << base.status().message();
  auto* p = static_cast<uint8_t*>(base.value());
  ASSERT_EQ(WriteThenReadBack(p, kBytes), -1);
  EXPECT_EQ(InMemory(rt), kBytes) << "it all fit";

  // The pod's limit comes down to 32 MiB: the budget follows, and the
  // policy sends pages to SSD until what is in memory fits it.
  wall.V2Level("/pod", std::to_string(32 * kMiB), "max", 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while ((Budget(rt) >= first || InMemory(rt) > Budget(rt)) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();  // a condition the policy thread meets
  }
  const uint64_t shrunk = Budget(rt);
  EXPECT_LE(shrunk, 32 * kMiB - 4 * kMiB);
  EXPECT_LE(InMemory(rt), shrunk) << "pages in memory over the budget";
  EXPECT_GE(Counters::Get(rt.counters().budget_cuts), 1u);
  EXPECT_GT(Counters::Get(rt.counters().spilled_pages), 0u);
  for (size_t off = 0; off < kBytes; off += 4096) {
    ASSERT_EQ(p[off], static_cast<uint8_t>(off >> 12 | 1)) << "offset " << off;
  }
  EXPECT_EQ(Counters::Get(rt.counters().wall_bytes), 32 * kMiB);
  ASSERT_TRUE(rt.FreeRegion(base.value()));
}

TEST_F(SimDiskTest, AFixedBudgetAboveTheWallIsCapped) {
  storage_test::TempDir stats_dir("/dev/shm");
  ASSERT_TRUE(stats_dir.ok());
  std::map<std::string, std::string> values = SpillingHostValues(dir_.path(), stats_dir.path());
  values["KVTIER_HOST_BUDGET"] = "1G";
  FakeTree wall;
  wall.Machine();
  wall.V1("/pod");
  wall.V1Level("/pod", std::to_string(40 * kMiB), 0);
  Result<std::unique_ptr<Runtime>> made = MakeHostRuntime(values, wall.root());
  ASSERT_TRUE(made.ok()) << made.status().message();
  // The room the wall leaves: less its headroom (4 MiB at least) and the
  // disk tier's buffers still to be made.
  EXPECT_LE(Budget(*made.value()),
            40 * kMiB - 4 * kMiB - kDiskBufferReserve + AlignedBuffer::live_bytes());
  EXPECT_GE(Budget(*made.value()), WallFloor(64 * 1024));
  // A fixed budget does not follow the wall: nothing of it is published.
  EXPECT_EQ(Counters::Get(made.value()->counters().wall_source), 0u);
}

}  // namespace
}  // namespace kvtier::testing
