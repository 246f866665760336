// CostAwarePolicy: GreedyDual-Size-Frequency over restore cost, and the
// transfer-versus-recompute rule.
#include <gtest/gtest.h>

#include "policies/cost_aware.h"
#include "tests/unit/policy_fixture.h"

namespace kvtier {
namespace {

using testing::MovesTo;
using testing::PolicyBed;

TieringOptions Plain() {
  TieringOptions o;
  o.cross_layer = false;
  o.neighbour_pages = 0;
  o.refault_protection = false;  // so only the priority decides
  return o;
}

TEST(CostAwarePolicy, FrequencyAndRefaultsRaiseThePriority) {
  PolicyBed bed;
  bed.AddRegion("UUUU");
  CostAwarePolicy policy(Plain());
  bed.Fault(policy, 1, 0);
  bed.Fault(policy, 1, 1);
  bed.Fault(policy, 1, 2);
  bed.Fault(policy, 1, 3);
  bed.Send(policy, SignalKind::kAccess, 1, 0);  // twice the frequency
  // Page 1: demoted and faulted straight back, a refault: twice the cost.
  bed.region(1).pages[1].tier = Tier::kHost;
  bed.region(1).pages[1].last_move = bed.now();
  bed.Advance();
  bed.Fault(policy, 1, 1);
  bed.Advance();
  // 4 resident on a 3-page device: down to 2.25 -> 2 victims, the cheapest.
  std::vector<std::string> v = MovesTo(bed.Tick(policy, 3), Tier::kHost);
  std::sort(v.begin(), v.end());
  EXPECT_EQ(v, (std::vector<std::string>{"1:2", "1:3"}));
}

TEST(CostAwarePolicy, InflationAgesOldPagesBelowNewOnes) {
  PolicyBed bed;
  bed.AddRegion("UUUUUU");
  CostAwarePolicy policy(Plain());
  for (uint32_t p = 0; p < 4; ++p) bed.Fault(policy, 1, p);
  bed.Send(policy, SignalKind::kAccess, 1, 3);  // page 3 is worth two
  bed.Advance();
  ASSERT_EQ(MovesTo(bed.Tick(policy, 4), Tier::kHost).size(), 1u);  // 4 on 4: down to 3
  bed.Advance();
  // L rose to the victim's H: a page arriving now outranks the old ones of
  // equal frequency, and page 3 (frequency 2) is not the next victim.
  bed.Fault(policy, 1, 4);
  bed.Advance();
  std::vector<std::string> v = MovesTo(bed.Tick(policy, 4), Tier::kHost);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_NE(v[0], "1:4");
  EXPECT_NE(v[0], "1:3");
}

TEST(CostAwarePolicy, SpillsOnlyWhenDiskRestoreIsCheaperThanRecompute) {
  struct Case {
    const char* name;
    double recompute_ns_per_byte;
    size_t spills;
  };
  const Case cases[] = {
      {"recompute dearer than a disk restore: spill", 10.0, 3},
      {"recompute cheaper than a disk restore: keep on host", 0.01, 0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    PolicyBed bed;
    bed.AddRegion("HHHHHHHHHH");
    RestoreCosts costs;
    costs.recompute_ns_per_byte = c.recompute_ns_per_byte;
    CostAwarePolicy policy(Plain(), costs);
    EXPECT_EQ(MovesTo(bed.Tick(policy, 10, 10, 100), Tier::kDisk).size(), c.spills);
  }
}

TEST(CostAwarePolicy, KeepsPagesDearerToRestoreThanToRecomputeWhileOthersCanGo) {
  PolicyBed bed;
  bed.AddRegion("UUUU");
  RestoreCosts costs;
  costs.recompute_ns_per_byte = 0;  // everything is cheaper to recompute ...
  TieringOptions o = Plain();
  CostAwarePolicy policy(o, costs);
  for (uint32_t p = 0; p < 4; ++p) bed.Fault(policy, 1, p);
  bed.Advance();
  // ... so nothing is a preferred victim, but the watermark still holds.
  EXPECT_EQ(MovesTo(bed.Tick(policy, 4), Tier::kHost).size(), 1u);
}

}  // namespace
}  // namespace kvtier
