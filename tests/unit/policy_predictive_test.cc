// PredictivePolicy: demand in every layer, population of written blocks,
// whole-group victims, probes, prefetch before a predicted return with a
// marker, and prediction off.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "policies/predictive.h"
#include "tests/unit/policy_fixture.h"

namespace kvtier {
namespace {

using testing::MovesTo;
using testing::PolicyBed;

// The next 32 blocks populated after a first touch, as with 64 KiB pages.
PredictiveOptions ThirtyTwoAhead() {
  PredictiveOptions o;
  o.populate_ahead_bytes = 32 * testing::kTestPage;
  return o;
}

// Ticks `bed` at `t` (the episode opens) and a few ticks later (it closes).
Decisions TickAt(PolicyBed& bed, Policy& p, uint32_t t, uint64_t device, uint64_t host = 1000) {
  bed.Advance(t - bed.now());
  Decisions d = bed.Tick(p, device, host);
  bed.Advance(5);
  Decisions closed = bed.Tick(p, device, host);
  d.moves.insert(d.moves.end(), closed.moves.begin(), closed.moves.end());
  return d;
}

void FaultPages(PolicyBed& bed, Policy& p, RegionId r, std::vector<uint32_t> pages) {
  for (uint32_t page : pages) bed.Fault(p, r, page);
}

// The device evicted the pages to the host itself (it was full), and said so.
void Evict(PolicyBed& bed, Policy& p, RegionId r, std::vector<uint32_t> pages) {
  for (uint32_t page : pages) {
    bed.region(r).pages[page].tier = Tier::kHost;
    bed.Send(p, SignalKind::kEvicted, r, page, Tier::kDevice);
  }
}

TEST(PredictivePolicy, AFaultInOneLayerBringsTheBlockInEveryOtherLayer) {
  PolicyBed bed;
  for (int l = 0; l < 3; ++l) bed.AddRegion("HHHH");  // three layers, four blocks
  PredictivePolicy policy;
  FaultPages(bed, policy, 1, {0, 2});
  Decisions d = bed.Tick(policy, 100);
  // Layer-major: the next layer's blocks first.
  EXPECT_EQ(MovesTo(d, Tier::kDevice), (std::vector<std::string>{"2:0", "2:2", "3:0", "3:2"}));
  for (const Move& m : d.moves) EXPECT_EQ(m.why, MoveClass::kDemand);
}

TEST(PredictivePolicy, ABlockWrittenInOneLayerIsPopulatedInTheOthers) {
  PolicyBed bed;
  for (int l = 0; l < 3; ++l) bed.AddRegion("UUUU");
  PredictivePolicy policy;
  bed.Fault(policy, 1, 1);  // a first touch
  bed.Tick(policy, 100);
  EXPECT_EQ(bed.region(2).pages[1].tier.load(), Tier::kDevice);
  EXPECT_EQ(bed.region(3).pages[1].tier.load(), Tier::kDevice);
  EXPECT_EQ(bed.region(2).pages[0].tier.load(), Tier::kUntouched);
  // No room below the high watermark: no population, and no victim for it
  // (the room above the watermark is for the engine's faults).
  PolicyBed full;
  for (int l = 0; l < 3; ++l) full.AddRegion("DDDU");
  PredictivePolicy p2;
  full.Fault(p2, 1, 3);
  Decisions d = full.Tick(p2, 11);
  EXPECT_EQ(full.region(2).pages[3].tier.load(), Tier::kUntouched);
  EXPECT_TRUE(MovesTo(d, Tier::kHost).empty());
}

class PredictivePolicyBothWays : public ::testing::TestWithParam<bool> {};

// With prediction off too: a group idle by its age alone (never probed, as
// nothing pressed when it went quiet) is a victim all the same.
TEST_P(PredictivePolicyBothWays, VictimsAreIdleGroupsAndARecentOneIsProbedFirst) {
  PolicyBed bed;
  bed.AddRegion(std::string(8, 'U'));
  PredictiveOptions o;
  o.predict = GetParam();
  PredictivePolicy policy(o);
  FaultPages(bed, policy, 1, {0, 1, 2, 3});  // session A writes at tick 1
  TickAt(bed, policy, 1, 100);
  FaultPages(bed, policy, 1, {4, 5, 6, 7});  // session B much later
  TickAt(bed, policy, 4'000, 100);
  // At 5,000 the device is over its high watermark (8 on 6): A (idle for
  // 5,000 ticks) goes; B (1,000) is probed: its latest block's page alone.
  Decisions d = TickAt(bed, policy, 5'000, 6);
  std::set<uint32_t> down;
  for (const std::string& m : MovesTo(d, Tier::kHost)) down.insert(std::stoi(m.substr(2)));
  size_t of_a = 0, of_b = 0;
  for (uint32_t p : down) (p < 4 ? of_a : of_b) += 1;
  EXPECT_GE(of_a, 3u);
  EXPECT_EQ(of_b, 1u) << "B gets one probe and nothing else";
  EXPECT_LE(bed.Count(Tier::kDevice), 5u);
}

INSTANTIATE_TEST_SUITE_P(Predict, PredictivePolicyBothWays, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return i.param ? "On" : "Off";
                         });

// Session A writes blocks 0..3 of one region at tick 1, session B 4..7 at
// tick 1,000: A is the older.
void WriteTwoSessions(PolicyBed& bed, Policy& policy) {
  bed.AddRegion(std::string(8, 'U'));
  FaultPages(bed, policy, 1, {0, 1, 2, 3});
  TickAt(bed, policy, 1, 100);
  FaultPages(bed, policy, 1, {4, 5, 6, 7});
  TickAt(bed, policy, 1'000, 100);
}

TEST(PredictivePolicy, AGroupIdleByItsAgeLeavesAMarkerSoThatItsNextUseIsSeen) {
  PolicyBed bed;
  PredictivePolicy policy;
  WriteTwoSessions(bed, policy);
  // Under pressure (8 on 10 pages), both idle by age alone: each leaves one
  // page off the device.
  TickAt(bed, policy, 5'000, 10);
  std::vector<uint32_t> off;
  for (uint32_t p = 0; p < 8; ++p) {
    if (bed.region(1).pages[p].tier.load() != Tier::kDevice) off.push_back(p);
  }
  ASSERT_EQ(off.size(), 2u);
  ASSERT_LT(off[0], 4u);
  ASSERT_GE(off[1], 4u);
  // A is read again. Its resident pages do not fault; its marker does.
  bed.Advance(10);
  for (uint32_t p = 0; p < 4; ++p) {
    if (bed.region(1).pages[p].tier.load() != Tier::kDevice) bed.Fault(policy, 1, p);
  }
  // Tighter (7 on 6 pages): B, not A, is the victim.
  TickAt(bed, policy, bed.now() + 10, 6);
  for (uint32_t p = 0; p < 4; ++p) {
    EXPECT_EQ(bed.region(1).pages[p].tier.load(), Tier::kDevice) << "A's page " << p;
  }
  EXPECT_LE(bed.Count(Tier::kDevice), 5u);
}

// A session's decode writes new blocks, which join its group, and reads its
// resident ones without a fault. Its group was used then: it is probed from
// then on as after any evidence, so that its next use, served from the
// device, faults the marker and is seen.
TEST(PredictivePolicy, AGroupThatTookADecodesNewBlocksLeavesAMarkerSoThatItsNextUseIsSeen) {
  PolicyBed bed;
  bed.AddRegion(std::string(10, 'U'));
  PredictiveOptions o;
  o.populate_ahead_bytes = 0;  // every new block first touched with a fault
  PredictivePolicy policy(o);
  FaultPages(bed, policy, 1, {0, 1, 2, 3});  // A's prompt at tick 1
  TickAt(bed, policy, 1, 100);
  bed.Advance(50 - bed.now());
  bed.Fault(policy, 1, 4);  // A's decode writes a block at tick 50: a trickle, it joins A
  TickAt(bed, policy, 50, 100);
  FaultPages(bed, policy, 1, {5, 6, 7, 8});  // B's prompt at tick 1,000
  TickAt(bed, policy, 1'000, 100);
  // Under pressure (9 on 11 pages), both idle by age: each leaves its
  // latest block's page off the device.
  TickAt(bed, policy, 5'000, 11);
  ASSERT_NE(bed.region(1).pages[4].tier.load(), Tier::kDevice) << "A's marker";
  ASSERT_NE(bed.region(1).pages[8].tier.load(), Tier::kDevice) << "B's marker";
  // A is read again: its resident pages do not fault, its marker does.
  bed.Advance(10);
  for (uint32_t p = 0; p < 5; ++p) {
    if (bed.region(1).pages[p].tier.load() != Tier::kDevice) bed.Fault(policy, 1, p);
  }
  // Tighter (8 on 7 pages): B, used longer ago, is the victim, not A.
  TickAt(bed, policy, bed.now() + 10, 7);
  for (uint32_t p = 0; p < 5; ++p) {
    EXPECT_EQ(bed.region(1).pages[p].tier.load(), Tier::kDevice) << "A's page " << p;
  }
  EXPECT_LE(bed.Count(Tier::kDevice), 6u);
}

TEST(PredictivePolicy, AGroupThatLostAPageToTheDevicesEvictionGoesWhole) {
  PolicyBed bed;
  PredictivePolicy policy;
  WriteTwoSessions(bed, policy);
  // The device, full at a fault, evicted one of B's pages itself: B is the
  // victim the policy was too slow to pick. The demotions that follow (7 on
  // 6 pages: over the high watermark) take the rest of B, not A. A, idle,
  // gives only its marker (its latest block, 3), so that its next use is
  // seen.
  bed.Advance(5'000 - bed.now());
  Evict(bed, policy, 1, {5});
  Decisions d = TickAt(bed, policy, bed.now(), 6);
  size_t of_b = 0;
  for (const std::string& m : MovesTo(d, Tier::kHost)) {
    const int page = std::stoi(m.substr(2));
    EXPECT_TRUE(page >= 3) << m << ": A went instead of the rest of B";
    of_b += page >= 4;
  }
  EXPECT_GE(of_b, 1u);
  for (uint32_t p = 0; p < 3; ++p) EXPECT_EQ(bed.region(1).pages[p].tier.load(), Tier::kDevice);
}

// One session of eight blocks in two layers (regions 1 and 2) goes off the
// device whole, its demotion over, and comes back: its first kernel faults
// seven of its eight blocks. The policy then ticks on a device of
// `device_pages` pages.
void ReturnOfAWholeGroup(PolicyBed& bed, PredictivePolicy& policy, uint64_t device_pages) {
  for (int l = 0; l < 2; ++l) bed.AddRegion(std::string(8, 'U'));
  bed.AddRegion("U");  // another session's block, written later
  FaultPages(bed, policy, 1, {0, 1, 2, 3, 4, 5, 6, 7});
  TickAt(bed, policy, 1, 100);
  TickAt(bed, policy, 5'000, 1);  // a one-page device: all of it goes
  ASSERT_EQ(bed.Count(Tier::kDevice), 0u);
  // Another session writes: the demotion of the first is over.
  bed.Advance(6'000 - bed.now());
  bed.Fault(policy, 3, 0);
  TickAt(bed, policy, bed.now(), 1);
  bed.Advance(10'000 - bed.now());
  FaultPages(bed, policy, 1, {0, 1, 2, 3, 4, 5, 6});
  for (int t = 0; t < 10; ++t) TickAt(bed, policy, bed.now() + 1, device_pages);
}

TEST(PredictivePolicy, AGroupThatComesBackIsBroughtBackWhole) {
  PolicyBed bed;
  PredictivePolicy policy;
  ReturnOfAWholeGroup(bed, policy, 100);
  EXPECT_EQ(bed.region(1).pages[7].tier.load(), Tier::kDevice) << "the block not faulted yet";
  EXPECT_EQ(bed.region(2).pages[7].tier.load(), Tier::kDevice);
}

TEST(PredictivePolicy, AGroupLargerThanHalfTheDeviceComesBackAsItFaults) {
  // On a 20-page device: moving all 16 pages would push out what is in use,
  // so only the blocks its kernels read come back (in both layers).
  PolicyBed bed;
  PredictivePolicy policy;
  ReturnOfAWholeGroup(bed, policy, 20);
  EXPECT_EQ(bed.region(2).pages[6].tier.load(), Tier::kDevice) << "a faulted block's other layer";
  EXPECT_EQ(bed.region(1).pages[7].tier.load(), Tier::kHost) << "the block not read";
  EXPECT_EQ(bed.region(2).pages[7].tier.load(), Tier::kHost);
}

// The pages of region 1 that `d` demoted.
std::vector<uint32_t> PagesDown(const Decisions& d) {
  std::vector<uint32_t> pages;
  for (const std::string& m : MovesTo(d, Tier::kHost)) {
    if (m.rfind("1:", 0) == 0) pages.push_back(static_cast<uint32_t>(std::stoul(m.substr(2))));
  }
  return pages;
}

TEST(PredictivePolicy, BlocksPopulatedAheadThatTheEngineHandedOutGoFirst) {
  PolicyBed bed;
  bed.AddRegion(std::string(80, 'U'));
  PredictivePolicy policy(ThirtyTwoAhead());
  bed.Fault(policy, 1, 0);  // a first touch, the device nearly empty: the next blocks too
  TickAt(bed, policy, 1, 100);
  ASSERT_EQ(bed.region(1).pages[5].tier.load(), Tier::kDevice) << "populated ahead";
  ASSERT_EQ(bed.Count(Tier::kDevice), 33u);
  // The engine wrote 1..32 without a fault and moved on: 33 is first
  // touched, and 34..65 are populated in turn.
  bed.Fault(policy, 1, 33);
  TickAt(bed, policy, 10, 100);
  ASSERT_EQ(bed.Count(Tier::kDevice), 66u);
  // Under pressure (66 on 43 pages: down to 32), long after: the blocks
  // handed out, that no group claimed, leave first, then the idle groups'
  // pages; the blocks the engine has not reached yet stay, as the room it
  // is about to write. (The group, idle by its age, first leaves its marker
  // off the device: its latest block, 33.)
  bed.Advance(5'000 - bed.now());
  Decisions d = TickAt(bed, policy, bed.now(), 43);
  std::vector<uint32_t> down = PagesDown(d);
  ASSERT_GE(down.size(), 34u);
  EXPECT_EQ(down[0], 33u) << "the group's marker";
  for (size_t i = 1; i <= 32; ++i) {
    EXPECT_TRUE(down[i] >= 1 && down[i] <= 32) << "page " << down[i] << " went " << i + 1 << "th";
  }
  EXPECT_EQ(bed.region(1).pages[0].tier.load(), Tier::kHost);
  EXPECT_EQ(bed.region(1).pages[33].tier.load(), Tier::kHost);
  for (uint32_t p = 34; p < 66; ++p) {
    EXPECT_EQ(bed.region(1).pages[p].tier.load(), Tier::kDevice) << "page " << p;
  }
}

TEST(PredictivePolicy, AVictimLeavesWholeBlocksInEveryLayerOldestFirst) {
  // Two sessions prefilled together are one group until one returns; made
  // room for one page at a time, the group loses whole blocks in slot
  // order (the order they were written), so the later session stays whole
  // rather than every session losing its first layers.
  PolicyBed bed;
  for (int l = 0; l < 4; ++l) bed.AddRegion(std::string(8, 'U'));
  PredictivePolicy policy;
  for (RegionId r = 1; r <= 4; ++r) FaultPages(bed, policy, r, {0, 1, 2, 3, 4, 5, 6, 7});
  TickAt(bed, policy, 1, 100);
  ASSERT_EQ(policy.groups().GroupOf(PageKey(1, 0)), policy.groups().GroupOf(PageKey(1, 7)));
  ASSERT_EQ(bed.Count(Tier::kDevice), 32u);
  // 32 on 30 pages, long after: down to the low watermark (22), 10 pages.
  Decisions d = TickAt(bed, policy, 5'000, 30);
  ASSERT_EQ(MovesTo(d, Tier::kHost).size(), 10u);
  for (RegionId r = 1; r <= 4; ++r) {
    EXPECT_EQ(bed.region(r).pages[0].tier.load(), Tier::kHost) << "layer " << r;
    EXPECT_EQ(bed.region(r).pages[1].tier.load(), Tier::kHost) << "layer " << r;
    for (uint32_t p = 3; p < 7; ++p) {  // (7 of the first layer is the group's marker)
      EXPECT_EQ(bed.region(r).pages[p].tier.load(), Tier::kDevice)
          << "layer " << r << " page " << p;
    }
  }
}

// One session's worth of decode: a block a tick, 0..11, in two layers (24
// pages), written on a device of 100 pages. One group, in use. Nothing is
// populated ahead, so the only pages are the group's.
void WriteABlockATick(PolicyBed& bed, PredictivePolicy& policy) {
  for (int l = 0; l < 2; ++l) bed.AddRegion(std::string(12, 'U'));
  for (uint32_t b = 0; b < 12; ++b) {
    bed.Fault(policy, 1, b);
    bed.Tick(policy, 100);  // populates the block in the other layer
    bed.Advance(1);
  }
  for (int t = 0; t < 5; ++t, bed.Advance(1)) bed.Tick(policy, 100);  // its episode closes
}

PredictiveOptions NothingAhead() {
  PredictiveOptions o;
  o.populate_ahead_bytes = 0;
  return o;
}

TEST(PredictivePolicy, AGroupInUseLargerThanTheDeviceGivesItsOldestBlocksOnceTheDeviceEvicts) {
  // Sessions written one after another with prompts too small to tell them
  // apart are one group, in use while any of them is written. On a device
  // smaller than it, no group is idle: the driver evicts at every fault
  // while the engine waits. Once it has, the group's oldest blocks (the
  // earliest sessions') leave ahead of the faults, down to the high
  // watermark, and what arrived in the last ticks stays.
  PolicyBed bed;
  PredictivePolicy policy(NothingAhead());
  WriteABlockATick(bed, policy);
  const GroupId g = policy.groups().GroupOf(PageKey(1, 0));
  ASSERT_NE(g, kNoGroup);
  ASSERT_EQ(policy.groups().GroupOf(PageKey(1, 11)), g);
  ASSERT_EQ(bed.Count(Tier::kDevice), 24u);
  // The driver took block 0 of the first layer at a fault, and the engine
  // faulted it back: 24 on 20 pages, 6 down to the high watermark (18).
  Evict(bed, policy, 1, {0});
  bed.Fault(policy, 1, 0);
  Decisions d = bed.Tick(policy, 20);
  EXPECT_EQ(MovesTo(d, Tier::kHost),
            (std::vector<std::string>{"2:0", "1:1", "2:1", "1:2", "2:2", "1:3"}));
  for (const Move& m : d.moves) EXPECT_EQ(m.why, MoveClass::kDemand);
  EXPECT_EQ(policy.groups().GroupOf(PageKey(1, 1)), g) << "it keeps its blocks and its rank";
  // The engine faults blocks 1 and 2 back in the first layer (20 on 20
  // pages: no room for their other layers). The room for the next faults
  // comes from where the last walk stopped.
  bed.Advance(1);
  FaultPages(bed, policy, 1, {1, 2});
  d = bed.Tick(policy, 20);
  EXPECT_EQ(MovesTo(d, Tier::kHost), (std::vector<std::string>{"2:3", "1:4"}));
}

TEST(PredictivePolicy, AGroupInUseIsLeftToTheDriverUnlessItEvictsAndTheGroupIsLarger) {
  {
    // The device has not evicted: the group in use may fit after all.
    PolicyBed bed;
    PredictivePolicy policy(NothingAhead());
    WriteABlockATick(bed, policy);
    EXPECT_TRUE(MovesTo(bed.Tick(policy, 20), Tier::kHost).empty());
  }
  {
    // It has, but the group fits the device (24 pages on 25): it is all in
    // use, and the driver's one page at a fault costs less than a tenth of
    // the device taken from it.
    PolicyBed bed;
    PredictivePolicy policy(NothingAhead());
    WriteABlockATick(bed, policy);
    Evict(bed, policy, 1, {6});
    EXPECT_TRUE(MovesTo(bed.Tick(policy, 25), Tier::kHost).empty());
  }
}

TEST(PredictivePolicy, UnderPressureAFirstTouchStillPopulatesTheNextBlocks) {
  // The device between its watermarks: every request's new blocks would
  // otherwise wait for a population fault in every layer.
  PolicyBed bed;
  for (int l = 0; l < 2; ++l) bed.AddRegion(std::string(60, 'D') + std::string(60, 'U'));
  PredictivePolicy policy(ThirtyTwoAhead());
  bed.Fault(policy, 1, 60);
  // 121 on 150: above the low watermark (112), 14 pages below the high one.
  TickAt(bed, policy, 1, 150);
  // The written block in every layer, then the block ahead: under pressure
  // the blocks ahead take at most 1/64 of the device (2 pages of 150).
  EXPECT_EQ(bed.region(2).pages[60].tier.load(), Tier::kDevice) << "the other layer's block";
  EXPECT_EQ(bed.region(1).pages[61].tier.load(), Tier::kDevice) << "the next block";
  EXPECT_EQ(bed.region(2).pages[61].tier.load(), Tier::kDevice);
  EXPECT_EQ(bed.Count(Tier::kDevice), 124u);
}

TEST(PredictivePolicy, BlocksNotReachedYetGoWhenNoGroupIsIdle) {
  PolicyBed bed;
  bed.AddRegion(std::string(40, 'U'));
  PredictivePolicy policy(ThirtyTwoAhead());
  bed.Fault(policy, 1, 0);
  TickAt(bed, policy, 1, 100);
  ASSERT_EQ(bed.Count(Tier::kDevice), 33u);
  // The group of block 0 is in use (its evidence is fresh) and the device
  // is over its high watermark: the room populated ahead is given back
  // rather than none.
  bed.Advance(1);
  Decisions d = bed.Tick(policy, 30);
  std::vector<uint32_t> down = PagesDown(d);
  ASSERT_FALSE(down.empty());
  for (uint32_t p : down) EXPECT_GT(p, 0u) << "the written block went first";
  EXPECT_EQ(bed.region(1).pages[0].tier.load(), Tier::kDevice);
}

TEST(PredictivePolicy, TwoSessionsWrittenTogetherPartWhenOneComesBack) {
  PolicyBed bed;
  bed.AddRegion(std::string(8, 'U'));
  PredictivePolicy policy;
  FaultPages(bed, policy, 1, {0, 1, 2, 3, 4, 5, 6, 7});  // A (0-3) and B (4-7) at once
  TickAt(bed, policy, 1, 100);
  const GroupId together = policy.groups().GroupOf(PageKey(1, 0));
  ASSERT_EQ(policy.groups().GroupOf(PageKey(1, 4)), together);
  TickAt(bed, policy, 5'000, 1);  // all of it goes
  ASSERT_EQ(bed.Count(Tier::kDevice), 0u);
  bed.Advance(10'000 - bed.now());
  FaultPages(bed, policy, 1, {0, 1, 2, 3});  // A comes back, B does not
  for (int t = 0; t < 10; ++t) TickAt(bed, policy, bed.now() + 1, 100);
  EXPECT_NE(policy.groups().GroupOf(PageKey(1, 0)), policy.groups().GroupOf(PageKey(1, 4)));
  for (uint32_t p = 4; p < 8; ++p) {
    EXPECT_EQ(bed.region(1).pages[p].tier.load(), Tier::kHost) << "B's page " << p;
  }
}

// A group's probe and what follows: a fault keeps it in use, silence makes
// it idle.
uint32_t DemotionsOfBAfterItsProbe(bool fault_probe) {
  PolicyBed bed;
  bed.AddRegion(std::string(10, 'U'));
  bed.AddRegion("U");  // another region: a page written later
  PredictivePolicy policy;
  FaultPages(bed, policy, 1, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  TickAt(bed, policy, 1, 100);
  // 10 pages on an 11-page device: over the high watermark, not full.
  Decisions d = TickAt(bed, policy, 1'000, 11);  // pressure: the probe
  std::vector<std::string> probe = MovesTo(d, Tier::kHost);
  if (probe.size() != 1) return 100 + static_cast<uint32_t>(probe.size());
  const uint32_t page = std::stoi(probe[0].substr(2));
  if (fault_probe) {
    bed.Advance(2);
    bed.Fault(policy, 1, page);  // the engine still reads the group
  }
  bed.Advance(1'025 - bed.now());
  bed.Fault(policy, 2, 0);  // new KV elsewhere: the device is over its high watermark again
  // Over high and not full: 11 pages on 12 with the probe faulted back, 10
  // on 11 without.
  d = TickAt(bed, policy, 1'030, fault_probe ? 12 : 11);
  std::erase_if(d.moves, [](const Move& m) { return m.region != 1; });
  return static_cast<uint32_t>(MovesTo(d, Tier::kHost).size());
}

TEST(PredictivePolicy, AProbeThatFaultsKeepsTheGroupInUse) {
  EXPECT_EQ(DemotionsOfBAfterItsProbe(true), 0u);
  EXPECT_GT(DemotionsOfBAfterItsProbe(false), 0u);
}

// Four sessions of two blocks, created 1,500 ticks apart; three come back
// 10,000 ticks after, which teaches the population's interval. The fourth
// is then off the device; returns the policy's moves between 12,100 and
// 14,000, before that session's predicted return at 14,501.
Decisions BeforeThePredictedReturn(bool predict, PolicyBed& bed, PredictivePolicy& policy) {
  bed.AddRegion(std::string(8, 'U'));
  for (uint32_t s = 0; s < 4; ++s) {
    FaultPages(bed, policy, 1, {2 * s, 2 * s + 1});
    TickAt(bed, policy, 1 + 1'500 * s, 100);
  }
  for (uint32_t s = 0; s < 3; ++s) {
    for (uint32_t p : {2 * s, 2 * s + 1}) bed.region(1).pages[p].tier = Tier::kHost;
    bed.Advance(10'001 + 1'500 * s - bed.now());
    FaultPages(bed, policy, 1, {2 * s, 2 * s + 1});
    TickAt(bed, policy, bed.now(), 100);
  }
  Evict(bed, policy, 1, {6, 7});
  Decisions all;
  for (uint32_t t = 12'100; t < 14'000; t += 100) {
    Decisions d = TickAt(bed, policy, t, 100);
    all.moves.insert(all.moves.end(), d.moves.begin(), d.moves.end());
  }
  return all;
}

TEST(PredictivePolicy, AGroupComesBackBeforeItsPredictedReturnLeavingAMarker) {
  PolicyBed bed;
  PredictivePolicy policy;
  Decisions d = BeforeThePredictedReturn(true, bed, policy);
  // Page 7 comes back ahead; page 6, the group's first, stays as a marker.
  EXPECT_EQ(MovesTo(d, Tier::kDevice), (std::vector<std::string>{"1:7"}));
  for (const Move& m : d.moves) {
    if (m.to == Tier::kDevice) {
      EXPECT_EQ(m.why, MoveClass::kPrefetch);
    }
  }
  EXPECT_EQ(bed.region(1).pages[6].tier.load(), Tier::kHost);
  // The session's use faults the marker: a visit the policy sees.
  const GroupId g = policy.groups().GroupOf(PageKey(1, 6));
  const uint32_t visits = policy.groups().group(g).visits;
  bed.Advance(14'501 - bed.now());
  bed.Fault(policy, 1, 6);
  TickAt(bed, policy, bed.now(), 100);
  EXPECT_EQ(policy.groups().group(g).visits, visits + 1);
}

TEST(PredictivePolicy, WithPredictionOffNothingComesBackAhead) {
  PolicyBed bed;
  PredictiveOptions o;
  o.predict = false;
  PredictivePolicy policy(o);
  Decisions d = BeforeThePredictedReturn(false, bed, policy);
  EXPECT_TRUE(MovesTo(d, Tier::kDevice).empty());
}

TEST(PredictivePolicy, AFullHostSpillsAnIdleGroupToDisk) {
  PolicyBed bed;
  bed.AddRegion("HHHHHHHHHH");
  PredictivePolicy policy;
  FaultPages(bed, policy, 1, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  TickAt(bed, policy, 1, 100);
  bed.Advance(4'000 - bed.now());
  Evict(bed, policy, 1, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  bed.Advance(5'000 - bed.now());
  Decisions d = bed.Tick(policy, 100, 10, 100);   // host 10 of 10, a disk tier
  EXPECT_GE(MovesTo(d, Tier::kDisk).size(), 3u);  // down to the low watermark
}

TEST(PredictivePolicy, ColdHintsDemoteAndWillNeedHintsPromote) {
  PolicyBed bed;
  bed.AddRegion("DDHH");
  PredictivePolicy policy;
  bed.Send(policy, SignalKind::kCold, 1, 0, Tier::kDevice, 2);
  bed.Send(policy, SignalKind::kWillNeed, 1, 2, Tier::kHost, 2);
  Decisions d = bed.Tick(policy, 100);
  EXPECT_EQ(MovesTo(d, Tier::kHost), (std::vector<std::string>{"1:0", "1:1"}));
  EXPECT_EQ(MovesTo(d, Tier::kDevice), (std::vector<std::string>{"1:2", "1:3"}));
}

}  // namespace
}  // namespace kvtier
