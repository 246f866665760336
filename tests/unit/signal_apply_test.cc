// ApplySignal: what each signal kind does to the page records.
#include "runtime/signal_apply.h"

#include <gtest/gtest.h>

namespace kvtier {
namespace {

Region MakeRegion() { return Region(1, 0x10000000, 4 << 20, 1 << 20, "t"); }

Signal Sig(SignalKind kind, uint32_t page, uint32_t pages = 1, Tier from = Tier::kHost) {
  Signal s;
  s.kind = kind;
  s.region = 1;
  s.page = page;
  s.pages = pages;
  s.from = from;
  return s;
}

TEST(ApplySignal, FaultIsAnAccessAndAMigration) {
  Region r = MakeRegion();
  ApplySignal(r, Sig(SignalKind::kFault, 1, 1, Tier::kUntouched), 7);
  EXPECT_EQ(r.pages[1].heat, kHeatStep);
  EXPECT_EQ(r.pages[1].last_access, 7u);
  EXPECT_EQ(r.pages[1].last_move, 7u);
  EXPECT_EQ(r.pages[1].refaults, 0);
  EXPECT_EQ(r.pages[0].last_access, 0u);
}

TEST(ApplySignal, RefaultOnlyWithinTheWindowAndOnlyFromHostOrDisk) {
  struct Case {
    const char* name;
    Tier from;
    uint32_t last_move, now;
    uint16_t refaults;
  };
  const Case cases[] = {
      {"host, soon after the demotion", Tier::kHost, 100, 100 + kRefaultWindowTicks - 1, 1},
      {"disk, soon after", Tier::kDisk, 100, 150, 1},
      {"host, after the window", Tier::kHost, 100, 100 + kRefaultWindowTicks, 0},
      {"first touch", Tier::kUntouched, 100, 101, 0},
      {"never moved", Tier::kHost, 0, 5, 0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Region r = MakeRegion();
    r.pages[0].last_move = c.last_move;
    SignalEffects fx;
    ApplySignal(r, Sig(SignalKind::kFault, 0, 1, c.from), c.now, &fx);
    EXPECT_EQ(r.pages[0].refaults, c.refaults);
    EXPECT_EQ(fx.refaults, c.refaults);
  }
}

TEST(ApplySignal, HeatDecaysLazily) {
  Region r = MakeRegion();
  for (int i = 0; i < 4; ++i) ApplySignal(r, Sig(SignalKind::kAccess, 0), 10);
  EXPECT_EQ(DecayedHeat(r.pages[0], 10), 4 * kHeatStep);
  EXPECT_EQ(DecayedHeat(r.pages[0], 10 + kHeatDecayTicks), 2 * kHeatStep);
  EXPECT_EQ(DecayedHeat(r.pages[0], 10 + 40 * kHeatDecayTicks), 0u);
  // An access after two halvings adds to the decayed value.
  ApplySignal(r, Sig(SignalKind::kAccess, 0), 10 + 2 * kHeatDecayTicks);
  EXPECT_EQ(r.pages[0].heat, 2 * kHeatStep);
}

TEST(ApplySignal, WillNeedIsRecentNotFrequent) {
  Region r = MakeRegion();
  ApplySignal(r, Sig(SignalKind::kAccess, 0), 10);
  for (int i = 0; i < 5; ++i) ApplySignal(r, Sig(SignalKind::kWillNeed, 0), 10 + kHeatDecayTicks);
  EXPECT_EQ(r.pages[0].last_access, 10 + kHeatDecayTicks);
  EXPECT_EQ(DecayedHeat(r.pages[0], 10 + kHeatDecayTicks), kHeatStep / 2);
}

TEST(ApplySignal, LaunchLeavesPagesAlone) {
  Region r = MakeRegion();
  ApplySignal(r, Sig(SignalKind::kLaunch, 0, 4), 9);
  for (uint32_t p = 0; p < 4; ++p) EXPECT_EQ(r.pages[p].last_access, 0u);
}

TEST(ApplySignal, HintsAndPinsSetFlagsOverTheirRangeClipped) {
  Region r = MakeRegion();
  ApplySignal(r, Sig(SignalKind::kWillNeed, 2, 10), 5);
  EXPECT_TRUE(r.pages[2].flags & kPageWillNeed);
  EXPECT_TRUE(r.pages[3].flags & kPageWillNeed);
  EXPECT_FALSE(r.pages[1].flags & kPageWillNeed);
  ApplySignal(r, Sig(SignalKind::kCold, 3), 6);
  EXPECT_FALSE(r.pages[3].flags & kPageWillNeed);
  EXPECT_EQ(r.pages[3].heat, 0u);
  ApplySignal(r, Sig(SignalKind::kPin, 0, 2), 7);
  EXPECT_TRUE(r.pages[1].flags & kPagePinned);
  ApplySignal(r, Sig(SignalKind::kUnpin, 1), 8);
  EXPECT_FALSE(r.pages[1].flags & kPagePinned);
  EXPECT_TRUE(r.pages[0].flags & kPagePinned);
  ApplySignal(r, Sig(SignalKind::kWillNeed, 99), 9);  // past the end: ignored
}

}  // namespace
}  // namespace kvtier
