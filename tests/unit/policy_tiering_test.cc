// What lfu-aging, s3fifo and cost-aware share (TieringPolicy): watermarks,
// pins, spills, hints, the tick budget, prefetchers, refault protection and
// scan resistance, each checked on all three.
#include <gtest/gtest.h>

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "policies/cost_aware.h"
#include "policies/lfu_aging.h"
#include "policies/s3fifo.h"
#include "policies/tiering_policy.h"
#include "tests/unit/policy_fixture.h"

namespace kvtier {
namespace {

using testing::kTestPage;
using testing::MovesTo;
using testing::PolicyBed;

std::unique_ptr<Policy> Make(const std::string& name, TieringOptions o = {}) {
  if (name == "lfu-aging") return std::make_unique<LfuAgingPolicy>(o);
  if (name == "s3fifo") return std::make_unique<S3FifoPolicy>(o);
  return std::make_unique<CostAwarePolicy>(o);
}

TieringOptions NoPrefetch() {
  TieringOptions o;
  o.neighbour_pages = 0;
  o.cross_layer = false;
  return o;
}

class TieringTest : public ::testing::TestWithParam<std::string> {};

struct WatermarkCase {
  const char* name;
  std::string pages;
  uint64_t device, host, disk;  // budgets in pages
  size_t demotions, spills;
  std::set<uint32_t> never;  // pages that must not move
};

TEST_P(TieringTest, WatermarksPinsAndSpills) {
  const WatermarkCase cases[] = {
      {"under the high watermark: nothing moves", "DDDDDDDD", 10, 100, 0, 0, 0, {}},
      {"over high: demote down to low (10 used, low 7.5: 3 pages)",
       "DDDDDDDDDD",
       10,
       100,
       0,
       3,
       0,
       {}},
      {"pinned and moving pages never leave",
       "PPPPPPPMMD",
       10,
       100,
       0,
       1,
       0,
       {0, 1, 2, 3, 4, 5, 6, 7, 8}},
      {"host over high: spill down to low", "HHHHHHHHHH", 10, 10, 100, 0, 3, {}},
      {"no disk tier: no spill", "HHHHHHHHHH", 10, 10, 0, 0, 0, {}},
      {"host full: nothing can be demoted", "DDDDDDDDDDHHHH", 10, 4, 0, 0, 0, {}},
  };
  for (const WatermarkCase& c : cases) {
    SCOPED_TRACE(c.name);
    PolicyBed bed;
    bed.AddRegion(c.pages);
    auto policy = Make(GetParam(), NoPrefetch());
    Decisions d = bed.Tick(*policy, c.device, c.host, c.disk);
    EXPECT_EQ(MovesTo(d, Tier::kHost).size(), c.demotions);
    EXPECT_EQ(MovesTo(d, Tier::kDisk).size(), c.spills);
    for (const Move& m : d.moves) EXPECT_EQ(c.never.count(m.page), 0u) << "page " << m.page;
  }
}

TEST_P(TieringTest, HintPromotesFirstAndTheVictimFollows) {
  PolicyBed bed;
  bed.AddRegion("DDDDDDDDDH");  // 9 on a 10-page device: at the high watermark
  auto policy = Make(GetParam(), NoPrefetch());
  bed.Send(*policy, SignalKind::kWillNeed, 1, 9);
  Decisions d = bed.Tick(*policy, 10);
  ASSERT_EQ(d.moves.size(), 2u);
  // A free frame takes the hinted page now; a victim then brings the device
  // back under its high watermark.
  EXPECT_EQ(d.moves[0], (Move{1, 9, Tier::kDevice, MoveClass::kDemand}));
  EXPECT_EQ(d.moves[1].to, Tier::kHost);
  EXPECT_EQ(d.moves[1].why, MoveClass::kDemote);
  EXPECT_EQ(bed.Count(Tier::kDevice), 9u);
}

TEST_P(TieringTest, FullDeviceSwapsAVictimOutJustBeforeThePromotion) {
  PolicyBed bed;
  bed.AddRegion("DDDDDDDDDDH");  // 10 on a 10-page device: no free frame
  auto policy = Make(GetParam(), NoPrefetch());
  bed.Send(*policy, SignalKind::kWillNeed, 1, 10);
  Decisions d = bed.Tick(*policy, 10);
  const std::vector<std::string> up = MovesTo(d, Tier::kDevice);
  ASSERT_EQ(up, (std::vector<std::string>{"1:10"}));
  // The demotion that makes the frame goes with the promotion (kRoom) and
  // the mover carries it out first, even though demand goes before plain
  // demotions.
  const std::vector<Move>& log = bed.device().log;
  size_t up_at = 0, room_at = log.size();
  for (size_t i = 0; i < log.size(); ++i) {
    if (log[i].to == Tier::kDevice) up_at = i;
  }
  for (size_t i = 0; i < d.moves.size(); ++i) {
    if (d.moves[i].why == MoveClass::kRoom) {
      EXPECT_EQ(d.moves[i + 1].to, Tier::kDevice);
      for (size_t j = 0; j < log.size(); ++j) {
        if (log[j].region == d.moves[i].region && log[j].page == d.moves[i].page) room_at = j;
      }
    }
  }
  ASSERT_LT(room_at, log.size()) << "no kRoom demotion";
  EXPECT_LT(room_at, up_at);
  EXPECT_LE(bed.Count(Tier::kDevice), 9u);  // and the device ends under its high watermark
}

TEST_P(TieringTest, FullHostTierSwapsInsteadOfStalling) {
  // Device and host both full (the engine filled the oversubscribed pool):
  // a hinted host page still comes up, trading places with a victim.
  PolicyBed bed;
  bed.AddRegion("DDDDDDDDDDHHHH");  // 10 on a 10-page device, 4 on a 4-page host
  auto policy = Make(GetParam(), NoPrefetch());
  bed.Send(*policy, SignalKind::kWillNeed, 1, 12);
  Decisions d = bed.Tick(*policy, 10, 4);
  EXPECT_EQ(MovesTo(d, Tier::kDevice), (std::vector<std::string>{"1:12"}));
  EXPECT_EQ(MovesTo(d, Tier::kHost).size(), 1u);
  EXPECT_EQ(bed.Count(Tier::kHost), 4u);  // one left, one came: the host stays at budget
  EXPECT_EQ(bed.region(1).pages[12].tier.load(), Tier::kDevice);
}

TEST_P(TieringTest, HintWithRoomNeedsNoVictim) {
  PolicyBed bed;
  bed.AddRegion("DDDDHHHH");
  auto policy = Make(GetParam(), NoPrefetch());
  bed.Send(*policy, SignalKind::kWillNeed, 1, 5, Tier::kHost, 2);
  Decisions d = bed.Tick(*policy, 10);
  EXPECT_EQ(MovesTo(d, Tier::kDevice), (std::vector<std::string>{"1:5", "1:6"}));
  EXPECT_TRUE(MovesTo(d, Tier::kHost).empty());
}

TEST_P(TieringTest, TickBudgetCapsThePlanAndTheRestFollows) {
  PolicyBed bed;
  bed.AddRegion("HHHHH");
  bed.set_move_cap(2 * kTestPage);
  auto policy = Make(GetParam(), NoPrefetch());
  bed.Send(*policy, SignalKind::kWillNeed, 1, 0, Tier::kHost, 5);
  EXPECT_EQ(MovesTo(bed.Tick(*policy, 100), Tier::kDevice),
            (std::vector<std::string>{"1:0", "1:1"}));
  bed.Advance();
  EXPECT_EQ(MovesTo(bed.Tick(*policy, 100), Tier::kDevice),
            (std::vector<std::string>{"1:2", "1:3"}));
}

struct PrefetchCase {
  const char* name;
  uint32_t neighbours;
  bool cross_layer;
  std::vector<std::string> expected;  // promotions after a fault on 1:1
};

TEST_P(TieringTest, PrefetchersFromOneFault) {
  const PrefetchCase cases[] = {
      {"cross-layer: the same offset in every sibling region", 0, true, {"2:1", "3:1"}},
      {"neighbourhood: the next pages of the faulting region", 2, false, {"1:2", "1:3"}},
      {"both, layer-major", 1, true, {"1:2", "2:1", "2:2", "3:1", "3:2"}},
      {"off", 0, false, {}},
  };
  for (const PrefetchCase& c : cases) {
    SCOPED_TRACE(c.name);
    PolicyBed bed;
    bed.AddRegion("HHHH");  // 1: the faulting layer
    bed.AddRegion("HHHH");  // 2, 3: its siblings (same size)
    bed.AddRegion("HHHH");
    bed.AddRegion("HHHHH");  // 4: another size, not a sibling
    TieringOptions o = NoPrefetch();
    o.neighbour_pages = c.neighbours;
    o.cross_layer = c.cross_layer;
    auto policy = Make(GetParam(), o);
    bed.Fault(*policy, 1, 1);
    EXPECT_EQ(MovesTo(bed.Tick(*policy, 100), Tier::kDevice), c.expected);
    // The same offset faulting in the next layer adds nothing new.
    bed.Advance();
    bed.Fault(*policy, 2, 3);  // page 3 of layer 2 had not been predicted when neighbours < 2
    bed.Advance();
    Decisions d = bed.Tick(*policy, 100);
    for (const std::string& m : MovesTo(d, Tier::kDevice)) {
      EXPECT_EQ(std::count(c.expected.begin(), c.expected.end(), m), 0) << m << " promoted twice";
    }
  }
}

TEST_P(TieringTest, PrefetchSkipsResidentMovingAndUntouchedPages) {
  PolicyBed bed;
  bed.AddRegion("HHHH");
  bed.AddRegion("DMUH");
  TieringOptions o = NoPrefetch();
  o.neighbour_pages = 3;
  o.cross_layer = true;
  auto policy = Make(GetParam(), o);
  bed.Fault(*policy, 1, 0);
  EXPECT_EQ(MovesTo(bed.Tick(*policy, 100), Tier::kDevice),
            (std::vector<std::string>{"1:1", "1:2", "1:3", "2:3"}));
}

TEST_P(TieringTest, FirstTouchPopulatesTheNextPagesAndTheOtherLayers) {
  PolicyBed bed;
  bed.AddRegion("UUUU");
  bed.AddRegion("UUUU");
  TieringOptions o = NoPrefetch();
  o.neighbour_pages = 1;
  o.cross_layer = true;
  auto policy = Make(GetParam(), o);
  bed.Fault(*policy, 1, 0);  // the engine writes new KV into page 0 of layer 1
  EXPECT_EQ(MovesTo(bed.Tick(*policy, 100), Tier::kDevice),
            (std::vector<std::string>{"1:1", "2:0", "2:1"}));
}

TEST_P(TieringTest, RefaultedPageIsProtectedWhileOthersCanGo) {
  for (bool protection : {true, false}) {
    SCOPED_TRACE(protection ? "protection on" : "protection off");
    PolicyBed bed;
    bed.AddRegion("UUU");
    TieringOptions o = NoPrefetch();
    o.refault_protection = protection;
    auto policy = Make(GetParam(), o);
    // Page 0: demoted at tick 2 and faulted back at tick 3, a refault.
    bed.Fault(*policy, 1, 0);
    bed.Advance();
    bed.region(1).pages[0].tier = Tier::kHost;
    bed.region(1).pages[0].last_move = bed.now();
    bed.Advance();
    bed.Fault(*policy, 1, 0);
    ASSERT_EQ(bed.region(1).pages[0].refaults, 1);
    bed.Advance();
    bed.Fault(*policy, 1, 1);
    bed.Fault(*policy, 1, 2);
    bed.Advance();
    std::vector<std::string> victims = MovesTo(bed.Tick(*policy, 3), Tier::kHost);
    ASSERT_EQ(victims.size(), 1u);
    if (protection) {
      EXPECT_NE(victims[0], "1:0");
    }
  }
}

// A hot set that keeps coming back against a one-off sweep: after a warm-up
// the sweep pages are the victims, never the hot set.
TEST_P(TieringTest, ScanResistance) {
  constexpr uint32_t kHot = 8, kSweepPerRound = 6, kRounds = 8;
  PolicyBed bed;
  bed.AddRegion(std::string(kHot, 'U'));
  bed.AddRegion(std::string(kSweepPerRound * kRounds, 'U'));
  auto policy = Make(GetParam(), NoPrefetch());
  for (uint32_t round = 0; round < kRounds; ++round) {
    for (uint32_t p = 0; p < kHot; ++p) {
      if (bed.region(1).pages[p].tier.load() != Tier::kDevice) bed.Fault(*policy, 1, p);
    }
    for (uint32_t p = 0; p < kSweepPerRound; ++p) bed.Fault(*policy, 2, round * kSweepPerRound + p);
    bed.Advance();
    Decisions d = bed.Tick(*policy, 16);
    if (round >= kRounds - 3) {
      for (const std::string& v : MovesTo(d, Tier::kHost)) {
        EXPECT_NE(v.rfind("1:", 0), 0u) << "round " << round << ": hot page " << v << " demoted";
      }
    }
    bed.Advance();
  }
  for (uint32_t p = 0; p < kHot; ++p) EXPECT_EQ(bed.region(1).pages[p].tier.load(), Tier::kDevice);
}

INSTANTIATE_TEST_SUITE_P(Policies, TieringTest,
                         ::testing::Values("lfu-aging", "s3fifo", "cost-aware"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

}  // namespace
}  // namespace kvtier
