// Every policy spills only what the backend may spill now (MaySpill): on a
// backend with a spill gate (the CUDA disk tier), a host page goes to disk
// only when it is dormant or the gate is sealed; without a gate, any.
#include <gtest/gtest.h>

#include <atomic>
#include <string>

#include "policies/policy_util.h"
#include "policies/registry.h"
#include "tests/unit/policy_fixture.h"

namespace kvtier {
namespace {

using testing::MovesTo;
using testing::PolicyBed;

class SpillGateTest : public ::testing::TestWithParam<std::string> {
 protected:
  std::unique_ptr<Policy> policy_ = MakePolicy(GetParam(), PolicySettings{});
  PolicyBed bed_;
  std::atomic<bool> sealed_{false};
};

TEST_P(SpillGateTest, OnlyDormantPagesSpillUntilTheGateIsSealed) {
  ASSERT_NE(policy_, nullptr);
  Region& r = bed_.AddRegion("DDHHHHHHHHHHHH");  // 12 host pages
  r.spill_gate = &sealed_;
  for (uint32_t p : {5u, 6u}) r.pages[p].flags.fetch_or(kPageDormant);
  // A host tier of 8 pages holding 12: pages must go to disk.
  for (int t = 0; t < 4; ++t) bed_.Tick(*policy_, 16, 8, 100);
  for (uint32_t p = 0; p < r.pages.size(); ++p) {
    const Tier tier = r.pages[p].tier.load();
    if (p == 5 || p == 6) {
      EXPECT_EQ(tier, Tier::kDisk) << "dormant page " << p;
    } else {
      EXPECT_NE(tier, Tier::kDisk) << "page " << p << " went to disk through a closed gate";
    }
  }
  sealed_.store(true);
  for (int t = 0; t < 4; ++t) bed_.Tick(*policy_, 16, 8, 100);
  EXPECT_LE(bed_.Count(Tier::kHost), 8u * 9 / 10) << "sealed: the host tier drains to disk";
  EXPECT_GT(bed_.Count(Tier::kDisk), 2u);
}

TEST_P(SpillGateTest, WithoutAGateAnyHostPageMaySpill) {
  ASSERT_NE(policy_, nullptr);
  bed_.AddRegion("DDHHHHHHHHHHHH");
  for (int t = 0; t < 4; ++t) bed_.Tick(*policy_, 16, 8, 100);
  EXPECT_LE(bed_.Count(Tier::kHost), 8u * 9 / 10);
}

// A policy's name as a test name ("lfu-aging" -> "lfu_aging").
std::string PolicyTestName(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  for (char& c : name) {
    if (c == '-') c = '_';
  }
  return name;
}

// The policies whose last resort is a scan of every host page (lru keeps a
// queue of them instead).
class SpillScanTest : public SpillGateTest {};

TEST_P(SpillScanTest, AScanThatFindsNothingToSpillIsPacedAndTheHostStillDrains) {
  ASSERT_NE(policy_, nullptr);
  Region& r = bed_.AddRegion("DDHHHHHHHHHHHH");  // 12 host pages
  r.spill_gate = &sealed_;
  // A host tier of 8 pages holding 12, and a closed gate: every tick wants
  // to spill, and a scan of every host page finds none that may go.
  for (int t = 0; t < 40; ++t) bed_.Tick(*policy_, 16, 8, 100);
  ASSERT_EQ(bed_.Count(Tier::kDisk), 0u);
  sealed_.store(true);
  // By now the scans are paced: the next tick does not look again...
  bed_.Tick(*policy_, 16, 8, 100);
  EXPECT_EQ(bed_.Count(Tier::kDisk), 0u) << "a fruitless scan was repeated at once";
  // ...but one within the longest pause does, and the host drains.
  uint32_t ticks = 1;
  while (bed_.Count(Tier::kDisk) == 0 && ticks <= ScanBackoff::kMaxTicks) {
    bed_.Tick(*policy_, 16, 8, 100);
    ++ticks;
  }
  EXPECT_LE(ticks, ScanBackoff::kMaxTicks);
  for (int t = 0; t < 4; ++t) bed_.Tick(*policy_, 16, 8, 100);
  EXPECT_LE(bed_.Count(Tier::kHost), 8u * 9 / 10) << "sealed: the host tier drains to disk";
}

INSTANTIATE_TEST_SUITE_P(Policies, SpillScanTest,
                         ::testing::Values("predictive", "lfu-aging", "s3fifo", "cost-aware"),
                         PolicyTestName);

INSTANTIATE_TEST_SUITE_P(Policies, SpillGateTest,
                         ::testing::Values("predictive", "lru", "lfu-aging", "s3fifo",
                                           "cost-aware"),
                         PolicyTestName);

}  // namespace
}  // namespace kvtier
