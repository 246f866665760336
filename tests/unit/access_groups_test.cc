// AccessGroups: groups from episodes of faults and first touches, visits and
// their intervals, merges, moves, shared slots, splits and predictions.
#include "policies/access_groups.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

namespace kvtier {
namespace {

constexpr size_t kPage = 64 << 10;

struct Bed {
  Bed() : region(std::make_shared<Region>(1, 0x100000000ull, 4096 * kPage, kPage, "layer 0")) {}
  // Evidence on slots [first, first + n) at tick `now`, then the tick ends.
  std::vector<EpisodeVisit> Touch(uint32_t now, uint32_t first, uint32_t n, bool first_touch) {
    for (uint32_t s = first; s < first + n; ++s) groups.OnEvidence(*region, s, first_touch);
    return Tick(now);
  }
  std::vector<EpisodeVisit> Tick(uint32_t now) {
    std::vector<EpisodeVisit> v;
    groups.EndTick(now, &v);
    return v;
  }
  GroupId Of(uint32_t slot) const { return groups.GroupOf(PageKey(region->id, slot)); }

  RegionPtr region;
  AccessGroups groups;
};

TEST(AccessGroups, APrefillAndItsDecodeAreOneGroupTheNextPromptAnother) {
  Bed b;
  // A prompt written in two chunks 35 ticks apart (two episodes), then a
  // decode's trickle of new blocks: all one session.
  b.Touch(10, 0, 512, true);
  b.Touch(45, 512, 300, true);
  b.Touch(60, 812, 1, true);
  b.Touch(80, 813, 1, true);
  b.Tick(100);  // the episode closes
  const GroupId a = b.Of(0);
  ASSERT_NE(a, kNoGroup);
  EXPECT_EQ(b.Of(600), a);
  EXPECT_EQ(b.Of(813), a);
  EXPECT_EQ(b.groups.group(a).live, 814u);
  // The next session's prompt, a burst after that decode: a group of its own.
  b.Touch(120, 1000, 400, true);
  b.Tick(200);
  EXPECT_NE(b.Of(1000), a);
  EXPECT_EQ(b.groups.group(b.Of(1000)).live, 400u);
}

TEST(AccessGroups, TheGroupThatTakesADecodesNewBlocksIsReportedWritten) {
  Bed b;
  b.Touch(10, 0, 512, true);  // a prompt
  b.Tick(20);                 // its episode closes: a new group, written
  const GroupId a = b.Of(0);
  EXPECT_EQ(b.groups.written(), a);
  b.Tick(21);  // nothing new
  EXPECT_EQ(b.groups.written(), kNoGroup);
  // A decode's new block, no fault: it joins the session, whose use moved to
  // the episode's end without any evidence on its own slots.
  b.Touch(60, 512, 1, true);
  EXPECT_TRUE(b.groups.touched().empty());
  EXPECT_EQ(b.groups.written(), kNoGroup) << "the episode is still open";
  b.Tick(70);
  EXPECT_EQ(b.Of(512), a);
  EXPECT_EQ(b.groups.written(), a);
  EXPECT_EQ(b.groups.group(a).last_active, 60u);
}

TEST(AccessGroups, AReturnIsAVisitAndIntervalsFollow) {
  Bed b;
  b.Touch(1, 0, 100, true);
  b.Tick(10);
  const GroupId g = b.Of(0);
  // Faults on its slots after a long idle time: a visit, at the burst's start.
  b.Touch(10'000, 0, 100, false);
  std::vector<EpisodeVisit> v = b.Tick(10'010);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].group, g);
  EXPECT_EQ(v[0].faulted, 100u);
  EXPECT_EQ(b.groups.group(g).visit, 10'000u);
  EXPECT_DOUBLE_EQ(b.groups.group(g).interval, 9'999);
  // More faults soon after are the same visit.
  b.Touch(10'100, 0, 100, false);
  EXPECT_TRUE(b.Tick(10'200).empty());
  EXPECT_EQ(b.groups.group(g).visits, 2u);
  // A marker's single fault is a visit too.
  b.groups.SetMarker(g, PageKey(1, 7));
  b.Touch(20'000, 7, 1, false);
  v = b.Tick(20'010);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(b.groups.group(g).visits, 3u);
}

TEST(AccessGroups, PiecesThatComeBackTogetherBecomeOne) {
  Bed b;
  b.Touch(1, 0, 100, true);
  b.Tick(1'000);
  b.Touch(2'000, 100, 40, true);  // the same session's later turn, written apart
  b.Tick(3'000);
  ASSERT_NE(b.Of(0), b.Of(100));
  b.Touch(20'000, 0, 140, false);  // both come back in one burst
  std::vector<EpisodeVisit> v = b.Tick(20'010);
  EXPECT_EQ(b.Of(0), b.Of(100));
  EXPECT_EQ(b.groups.group(b.Of(0)).live, 140u);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].faulted, 140u);
}

TEST(AccessGroups, AStraySlotFollowsTheSessionThatReadsItAndASharedOneStays) {
  Bed b;
  b.Touch(1, 0, 100, true);  // session A, with a prompt every session reads: slots 0-3
  b.Tick(1'000);
  b.Touch(2'000, 100, 100, true);  // session B
  b.Tick(3'000);
  b.Touch(4'000, 200, 100, true);  // session C
  b.Tick(5'000);
  const GroupId a = b.Of(10), bb = b.Of(100), c = b.Of(200);
  // B returns and reads A's first four slots: too few of A's to be A's
  // visit, so they move to B.
  b.Touch(10'000, 100, 100, false);
  b.Touch(10'000, 0, 4, false);
  b.Tick(10'100);
  EXPECT_EQ(b.Of(0), bb);
  EXPECT_EQ(b.Of(10), a);
  // C returns and reads them too: a third group, so they are shared.
  b.Touch(20'000, 200, 100, false);
  b.Touch(20'000, 0, 4, false);
  b.Tick(20'100);
  const GroupId shared = b.groups.shared();
  ASSERT_NE(shared, kNoGroup);
  EXPECT_EQ(b.Of(0), shared);
  EXPECT_EQ(b.Of(200), c);
  // A's return reads them again: they stay shared, and the shared group
  // visits beside A.
  b.Touch(30'000, 4, 96, false);
  b.Touch(30'000, 0, 4, false);
  std::vector<EpisodeVisit> v = b.Tick(30'100);
  EXPECT_EQ(b.Of(0), shared);
  bool a_visited = false, shared_visited = false;
  for (const EpisodeVisit& x : v) {
    a_visited |= x.group == a;
    shared_visited |= x.group == shared;
  }
  EXPECT_TRUE(a_visited);
  EXPECT_TRUE(shared_visited);
}

TEST(AccessGroups, ARegularPopulationPredictsAGroupFromItsFirstVisit) {
  Bed b;
  // Three sessions return every 5,000 ticks.
  for (uint32_t s = 0; s < 3; ++s) b.Touch(1 + s * 1'000, s * 100, 100, true);
  b.Tick(3'500);
  for (uint32_t s = 0; s < 3; ++s) {
    b.Touch(5'001 + s * 1'000, s * 100, 100, false);
    b.Tick(5'100 + s * 1'000);
  }
  EXPECT_NEAR(b.groups.population_interval(), 5'000, 1);
  // A fourth session seen once is predicted at its visit plus 5,000.
  b.Touch(8'000, 1'000, 100, true);
  b.Tick(8'100);
  const AccessGroup& g = b.groups.group(b.Of(1'000));
  EXPECT_TRUE(b.groups.Trusted(g));
  uint32_t next = 0;
  ASSERT_TRUE(b.groups.PredictNext(g, 8'100, &next));
  EXPECT_NEAR(next, 13'000, 1);
  // A missed return rolls the prediction on by an interval.
  ASSERT_TRUE(b.groups.PredictNext(g, 14'000, &next));
  EXPECT_NEAR(next, 18'000, 1);
}

TEST(AccessGroups, AnIrregularPopulationPredictsNothingTrusted) {
  Bed b;
  const uint32_t gaps[] = {900, 7'000, 2'500, 12'000};
  for (uint32_t s = 0; s < 4; ++s) b.Touch(1 + s * 50, s * 100, 100, true);
  b.Tick(1'000);
  for (uint32_t s = 0; s < 4; ++s) {
    b.Touch(2'000 + gaps[s] + s * 50, s * 100, 100, false);
    b.Tick(2'100 + gaps[s] + s * 50);
  }
  b.Touch(30'000, 1'000, 100, true);
  b.Tick(30'100);
  EXPECT_FALSE(b.groups.Trusted(b.groups.group(b.Of(1'000))));
  EXPECT_FALSE(b.groups.Trusted(b.groups.group(b.Of(0))));
}

TEST(AccessGroups, AGapOfSeveralStepsCountsTheReturnsNotSeen) {
  Bed b;
  b.Touch(1, 0, 100, true);
  b.Tick(100);
  for (uint32_t k = 1; k <= 3; ++k) {  // three returns 10,000 apart
    b.Touch(k * 10'000, 0, 100, false);
    b.Tick(k * 10'000 + 100);
  }
  const GroupId g = b.Of(0);
  EXPECT_NEAR(b.groups.group(g).interval, 10'000, 10);
  // Two returns unseen (it stayed resident), then one seen: still 10,000.
  b.Touch(60'000, 0, 100, false);
  b.Tick(60'100);
  EXPECT_NEAR(b.groups.group(g).interval, 10'000, 10);
}

TEST(AccessGroups, SplitKeepsWhatCameBackAndTheRestInheritsTheHistory) {
  Bed b;
  b.Touch(1, 0, 200, true);
  b.Tick(100);
  b.Touch(10'000, 0, 200, false);
  b.Tick(10'100);
  const GroupId g = b.Of(0);
  const GroupId rest = b.groups.Split(g, [](uint64_t slot) { return KeyPage(slot) < 120; });
  ASSERT_NE(rest, kNoGroup);
  EXPECT_EQ(b.Of(119), g);
  EXPECT_EQ(b.Of(120), rest);
  EXPECT_EQ(b.groups.group(g).live, 120u);
  EXPECT_EQ(b.groups.group(rest).live, 80u);
  EXPECT_EQ(b.groups.group(rest).visit, b.groups.group(g).visit);
  EXPECT_DOUBLE_EQ(b.groups.group(rest).interval, b.groups.group(g).interval);
  b.groups.ForgetIntervals(g);
  EXPECT_EQ(b.groups.group(g).intervals, 0u);
}

TEST(AccessGroups, SplitOffAfterVisitLeavesTheRestIdleSinceBefore) {
  Bed b;
  b.Touch(1, 0, 200, true);  // two sessions written together: one group
  b.Tick(100);
  b.Touch(20'000, 0, 120, false);  // one of them comes back
  b.Tick(20'100);
  const GroupId g = b.Of(0);
  ASSERT_EQ(b.Of(150), g);
  const GroupId rest =
      b.groups.SplitOffAfterVisit(g, [](uint64_t slot) { return KeyPage(slot) < 120; });
  ASSERT_NE(rest, kNoGroup);
  EXPECT_EQ(b.Of(150), rest);
  // The rest was not used in that visit: its evidence and visit are the
  // ones from before it, and neither keeps the shared intervals.
  EXPECT_EQ(b.groups.group(rest).last_active, 1u);
  EXPECT_EQ(b.groups.group(rest).visit, 1u);
  EXPECT_EQ(b.groups.group(g).last_active, 20'000u);
  EXPECT_EQ(b.groups.group(g).intervals, 0u);
  EXPECT_EQ(b.groups.group(rest).intervals, 0u);
}

TEST(AccessGroups, AFreedIdIsNotHandedOutBeforeTheCallerTookIt) {
  Bed b;
  b.Touch(1, 0, 4, true);
  b.Tick(100);
  b.Touch(2'000, 10, 4, true);
  b.Tick(2'100);
  const GroupId a = b.Of(0), other = b.Of(10);
  ASSERT_NE(a, other);
  // All of a's slots leave: a is freed. A new group made before the caller
  // took the freed ids must not get a's id, or the caller, dropping what it
  // kept for a, would drop it for the new group.
  ASSERT_NE(b.groups.Split(a, [](uint64_t) { return false; }), kNoGroup);
  EXPECT_FALSE(b.groups.Alive(a));
  const GroupId fresh = b.groups.Split(other, [](uint64_t slot) { return KeyPage(slot) < 12; });
  ASSERT_NE(fresh, kNoGroup);
  EXPECT_NE(fresh, a);
  for (GroupId id : b.groups.TakeFreed()) EXPECT_FALSE(b.groups.Alive(id)) << id;
  // Taken: now the id may serve again.
  const GroupId again = b.groups.Split(b.Of(0), [](uint64_t slot) { return KeyPage(slot) < 2; });
  EXPECT_EQ(again, a);
}

TEST(AccessGroups, SlotsLeavingAGroupAloneFormAGroupThatVisits) {
  Bed b;
  b.Touch(1, 0, 400, true);  // a pool written at once
  b.Tick(100);
  const GroupId pool = b.Of(0);
  // One session's blocks of it come back on their own: too few of the pool
  // to be its visit, so they form a group, and that is a visit of it.
  std::vector<EpisodeVisit> v = b.Touch(20'000, 0, 90, false);
  std::vector<EpisodeVisit> closed = b.Tick(20'100);
  v.insert(v.end(), closed.begin(), closed.end());
  const GroupId s = b.Of(0);
  ASSERT_NE(s, pool);
  EXPECT_EQ(b.groups.group(s).live, 90u);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].group, s);
  EXPECT_EQ(b.groups.group(s).visits, 1u);
}

TEST(AccessGroups, ASessionLeavingAPoolIsNotAMoveTowardsShared) {
  Bed b;
  b.Touch(1, 0, 1000, true);  // a pool written at once: sessions 0-99, 100-199, ...
  b.Tick(100);
  // The first session comes back alone: it leaves the pool, most of the
  // episode, so no slot of it counts a move.
  b.Touch(20'000, 0, 100, false);
  b.Tick(20'100);
  const GroupId first = b.Of(0);
  // The second comes back and reads slots 0-3 (a prompt in the first
  // session's group): one move for them, not yet shared.
  b.Touch(40'000, 100, 100, false);
  b.Touch(40'000, 0, 4, false);
  b.Tick(40'100);
  EXPECT_EQ(b.groups.shared(), kNoGroup);
  EXPECT_EQ(b.Of(0), b.Of(100));
  EXPECT_EQ(b.Of(10), first);
  // The first reads them again: a second move beside another's return.
  b.Touch(60'000, 4, 96, false);
  b.Touch(60'000, 0, 4, false);
  b.Tick(60'100);
  ASSERT_NE(b.groups.shared(), kNoGroup);
  EXPECT_EQ(b.Of(0), b.groups.shared());
}

TEST(AccessGroups, AGroupPresentByItsMarkerAloneVisitsOnItsOwn) {
  Bed b;
  b.Touch(1, 0, 100, true);  // session A
  b.Tick(1'000);
  b.Touch(2'000, 100, 100, true);  // session B
  b.Tick(3'000);
  const GroupId a = b.Of(0), bb = b.Of(100);
  b.groups.SetMarker(bb, PageKey(b.region->id, 150));
  // A comes back while B, served from the device, faults its marker only.
  b.Touch(20'000, 0, 100, false);
  std::vector<EpisodeVisit> v = b.Touch(20'001, 150, 1, false);
  std::vector<EpisodeVisit> closed = b.Tick(20'100);
  v.insert(v.end(), closed.begin(), closed.end());
  EXPECT_EQ(b.Of(0), a);
  EXPECT_EQ(b.Of(100), bb) << "B is not a piece of A";
  EXPECT_EQ(b.groups.group(bb).live, 100u);
  EXPECT_EQ(v.size(), 2u);
}

}  // namespace
}  // namespace kvtier
