// Mover: link budgets per direction, the order of move classes, swaps, the
// backlog, the deadline and the cap, on a manual clock and an instant device.
#include "runtime/mover.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/unit/policy_fixture.h"

namespace kvtier {
namespace {

using testing::InstantDevice;
using testing::kTestPage;
using testing::kTestTickNs;

// Bytes per second that make `pages` test pages per 10 ms tick.
double PagesPerTick(double pages) { return pages * kTestPage / (kTestTickNs / 1e9); }

struct Rig {
  explicit Rig(const std::string& pages, MoverConfig config = {}) : device(&regions, kTestPage) {
    auto r = std::make_shared<Region>(1, 0x100000000ull, pages.size() * kTestPage, kTestPage, "t");
    for (size_t i = 0; i < pages.size(); ++i) {
      r->pages[i].tier = pages[i] == 'D'   ? Tier::kDevice
                         : pages[i] == 'S' ? Tier::kDisk
                                           : Tier::kHost;
    }
    regions.push_back(r);
    config.tick_ns = kTestTickNs;
    mover = std::make_unique<Mover>(device, clock, config);
  }
  // One tick: the clock moves a tick period on, then the mover runs.
  MoveReport Run(const std::vector<Move>& moves) {
    if (tick > 0) clock.Advance(kTestTickNs);
    Decisions d;
    d.moves = moves;
    return mover->Execute(
        d, [this](RegionId id) { return id == 1 && alive ? regions[0].get() : nullptr; }, ++tick);
  }
  std::vector<std::string> Log() const {
    std::vector<std::string> out;
    for (const Move& m : device.log)
      out.push_back(std::string(TierName(m.to)) + ":" + std::to_string(m.page));
    return out;
  }
  Tier TierOf(uint32_t p) const { return regions[0]->pages[p].tier.load(); }

  std::vector<RegionPtr> regions;
  InstantDevice device;
  ManualClock clock;
  std::unique_ptr<Mover> mover;
  uint32_t tick = 0;
  bool alive = true;
};

Move Up(uint32_t p, MoveClass why = MoveClass::kDefault) { return {1, p, Tier::kDevice, why}; }
Move Down(uint32_t p, MoveClass why = MoveClass::kDefault) { return {1, p, Tier::kHost, why}; }
Move ToDisk(uint32_t p) { return {1, p, Tier::kDisk}; }

TEST(Mover, EachDirectionHasItsOwnBudgetAndTheRestWaitsForTheNextTick) {
  MoverConfig c;
  c.bps[kChannelUp] = PagesPerTick(2.5);
  c.bps[kChannelDown] = PagesPerTick(2.5);
  Rig rig("HHHHHDD", c);
  MoveBudget b = rig.mover->Budget();
  EXPECT_EQ(b.up, static_cast<uint64_t>(2.5 * kTestPage));
  EXPECT_EQ(b.spill, MoveBudget::kUnlimited);  // no figure: no byte budget
  // Full duplex: two up and two down in the same tick; three promotions wait.
  MoveReport r = rig.Run({Up(0), Up(1), Up(2), Up(3), Up(4), Down(5), Down(6)});
  EXPECT_EQ(r.bytes[kChannelUp], 2 * kTestPage);
  EXPECT_EQ(r.bytes[kChannelDown], 2 * kTestPage);
  EXPECT_EQ(r.deferred, 3u);
  EXPECT_EQ(rig.mover->backlog_size(), 3u);
  // The policy is told what is left once the backlog is served.
  EXPECT_EQ(rig.mover->Budget().up, 0u);
  r = rig.Run({});
  EXPECT_EQ(r.moves, 2u);
  r = rig.Run({});
  EXPECT_EQ(r.moves, 1u);
  EXPECT_EQ(rig.mover->backlog_size(), 0u);
  for (uint32_t p = 0; p < 5; ++p) EXPECT_EQ(rig.TierOf(p), Tier::kDevice) << p;
}

TEST(Mover, DemandThenPrefetchThenDemotionsThenSpills) {
  Rig rig("HHDHH");
  rig.Run({Down(2), ToDisk(4), Up(0, MoveClass::kPrefetch), Up(1, MoveClass::kDemand)});
  EXPECT_EQ(rig.Log(), (std::vector<std::string>{"device:1", "device:0", "host:2", "disk:4"}));
}

// A host tier over its budget is drained before prefetches run: with a cap
// of two pages a tick, the spill goes right after the demand promotion and
// the prefetch waits; with the host within budget the prefetch goes first.
TEST(Mover, SpillsGoRightAfterDemandWhileTheHostIsOverBudget) {
  for (bool over : {false, true}) {
    MoverConfig c;
    c.cap_bytes = 2 * kTestPage;
    Rig rig("HHHD", c);
    Decisions d;
    d.moves = {Up(0, MoveClass::kPrefetch), ToDisk(1), Up(2, MoveClass::kDemand)};
    rig.mover->Execute(
        d, [&](RegionId id) { return id == 1 ? rig.regions[0].get() : nullptr; }, 1, over);
    const std::vector<std::string> want = over ? std::vector<std::string>{"device:2", "disk:1"}
                                               : std::vector<std::string>{"device:2", "device:0"};
    EXPECT_EQ(rig.Log(), want) << (over ? "host over budget" : "host within budget");
  }
}

TEST(Mover, ARoomDemotionGoesWithItsPromotionOrNotAtAll) {
  MoverConfig c;
  c.bps[kChannelUp] = PagesPerTick(1);
  c.demand_burst_ticks = 0;  // no borrowing: one promotion a tick
  Rig rig("DDHH", c);
  // Two swaps; the up channel takes one promotion a tick, so the second
  // swap's demotion waits with its promotion although the down channel has
  // room.
  MoveReport r = rig.Run({Down(0, MoveClass::kRoom), Up(2, MoveClass::kDemand),
                          Down(1, MoveClass::kRoom), Up(3, MoveClass::kDemand)});
  EXPECT_EQ(rig.Log(), (std::vector<std::string>{"host:0", "device:2"}));
  EXPECT_EQ(r.deferred, 1u);  // one unit: the pair
  EXPECT_EQ(rig.TierOf(1), Tier::kDevice);
  rig.Run({});
  EXPECT_EQ(rig.Log(), (std::vector<std::string>{"host:0", "device:2", "host:1", "device:3"}));
}

TEST(Mover, ANewerDecisionForAPageReplacesTheWaitingOne) {
  MoverConfig c;
  c.bps[kChannelUp] = PagesPerTick(1);
  Rig rig("HHD", c);
  rig.Run({Up(0), Up(1)});  // page 1 waits
  ASSERT_EQ(rig.mover->backlog_size(), 1u);
  rig.Run({Down(1), Down(2)});  // page 1 is wanted down now: its promotion goes
  EXPECT_EQ(rig.mover->backlog_size(), 0u);
  EXPECT_EQ(rig.TierOf(1), Tier::kHost);
  EXPECT_EQ(rig.TierOf(2), Tier::kHost);
  EXPECT_EQ(rig.Log(), (std::vector<std::string>{"device:0", "host:2"}));  // page 1 never moved
}

TEST(Mover, MovesOfAFreedRegionAreDroppedQuietly) {
  MoverConfig c;
  c.bps[kChannelUp] = PagesPerTick(1);
  Rig rig("HH", c);
  rig.Run({Up(0), Up(1)});
  rig.alive = false;
  MoveReport r = rig.Run({});
  EXPECT_EQ(r.moves + r.failed + r.deferred, 0u);
  EXPECT_EQ(rig.mover->backlog_size(), 0u);
}

TEST(Mover, ABudgetBelowAPageStillMovesAtTheLinksRate) {
  // A tenth of a page per tick: a page goes, then the link repays it.
  MoverConfig c;
  c.bps[kChannelUp] = PagesPerTick(0.1);
  Rig rig("HHH", c);
  EXPECT_EQ(rig.Run({Up(0), Up(1), Up(2)}).moves, 1u);
  uint64_t moved = 0;
  for (int t = 0; t < 20; ++t) moved += rig.Run({}).moves;
  EXPECT_EQ(moved, 2u);  // about one page per 10 ticks
}

TEST(Mover, DemandBorrowsAheadAndTheOthersWaitUntilItIsRepaid) {
  MoverConfig c;
  c.bps[kChannelUp] = PagesPerTick(1);
  c.demand_burst_ticks = 4;
  Rig rig("HHHHHHHH", c);
  EXPECT_EQ(rig.mover->Budget().demand_up, 5 * kTestPage);  // one earned, four borrowed
  // A returning session's five pages go at once; a prefetch waits.
  MoveReport r =
      rig.Run({Up(0, MoveClass::kDemand), Up(1, MoveClass::kDemand), Up(2, MoveClass::kDemand),
               Up(3, MoveClass::kDemand), Up(4, MoveClass::kDemand), Up(5, MoveClass::kPrefetch)});
  EXPECT_EQ(r.moves, 5u);
  EXPECT_EQ(r.deferred, 1u);
  // Four ticks repay the debt; the prefetch goes on the fifth.
  for (int t = 0; t < 4; ++t) EXPECT_EQ(rig.Run({}).moves, 0u) << t;
  EXPECT_EQ(rig.Run({}).moves, 1u);
}

TEST(Mover, TheDeadlineStopsASlowTickAndTheRestFollows) {
  // A synchronous backend (no link figure): every move takes 8 ms of the
  // clock; the deadline is two 10 ms periods.
  Rig rig("HHHHHH");
  rig.device.on_move = [&] { rig.clock.Advance(8'000'000); };
  MoveReport r = rig.Run({Up(0), Up(1), Up(2), Up(3), Up(4), Up(5)});
  EXPECT_EQ(r.moves, 3u);  // started at 0, 8 and 16 ms; at 24 ms it stops
  EXPECT_EQ(r.deferred, 3u);
  r = rig.Run({});
  EXPECT_EQ(r.moves, 3u);
  EXPECT_EQ(rig.mover->backlog_size(), 0u);
}

TEST(Mover, TheCapBoundsAllDirectionsTogether) {
  MoverConfig c;
  c.cap_bytes = 3 * kTestPage;
  Rig rig("HHDD", c);
  EXPECT_EQ(rig.mover->Budget().up, 3 * kTestPage);
  MoveReport r = rig.Run({Up(0), Up(1), Down(2), Down(3)});
  EXPECT_EQ(r.moves, 3u);
  EXPECT_EQ(r.deferred, 1u);
  EXPECT_EQ(rig.mover->Budget().down, 2 * kTestPage);  // the waiting page counts
}

TEST(Mover, AnOverflowingBacklogDropsTheLeastUrgentAndSaysSo) {
  MoverConfig c;
  c.bps[kChannelUp] = PagesPerTick(1);
  c.bps[kChannelDown] = PagesPerTick(1);
  c.backlog_limit = 2;
  Rig rig("HHHHDDD", c);
  MoveReport r = rig.Run({Down(4), Down(5), Down(6), Up(0), Up(1), Up(2), Up(3)});
  EXPECT_EQ(r.moves, 2u);  // one each way
  EXPECT_EQ(r.deferred, 2u);
  EXPECT_EQ(r.dropped, 3u);
  rig.Run({});
  // The promotions were kept: demand goes before demotions.
  EXPECT_EQ(rig.TierOf(1), Tier::kDevice);
}

TEST(Mover, SpillsGoAsOneGroupAndAFailureIsReported) {
  Rig rig("HHHD");
  std::vector<std::string> failed;
  rig.mover->set_on_failure([&](Region&, const Move& m, const Status& st) {
    failed.push_back(std::to_string(m.page) + " " + st.message());
  });
  MoveReport r = rig.Run({ToDisk(0), ToDisk(1), ToDisk(2), {1, 3, Tier::kUntouched}});
  EXPECT_EQ(r.bytes[kChannelSpill], 3 * kTestPage);
  EXPECT_EQ(r.failed, 1u);
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_NE(failed[0].find("untouched"), std::string::npos);
}

TEST(Mover, ADroppedZeroPageCostsNoSpillBudget) {
  std::vector<RegionPtr> regions;
  auto r = std::make_shared<Region>(1, 0x100000000ull, 3 * kTestPage, kTestPage, "t");
  for (uint32_t p = 0; p < 3; ++p) r->pages[p].tier = Tier::kHost;
  regions.push_back(r);
  InstantDevice device(&regions, kTestPage);
  device.zero_pages = {1};
  ManualClock clock;
  MoverConfig config;
  config.tick_ns = kTestTickNs;
  Mover mover(device, clock, config);
  Decisions d;
  d.moves = {ToDisk(0), ToDisk(1), ToDisk(2)};
  MoveReport report = mover.Execute(
      d, [&](RegionId id) { return id == 1 ? r.get() : nullptr; }, 1);
  EXPECT_EQ(r->pages[1].tier.load(), Tier::kUntouched);
  EXPECT_EQ(r->pages[1].last_move, 1u);
  EXPECT_EQ(report.bytes[kChannelSpill], 2 * kTestPage) << "only the written pages";
  EXPECT_EQ(report.moves, 2u);
  EXPECT_EQ(report.failed, 0u);
}

}  // namespace
}  // namespace kvtier
