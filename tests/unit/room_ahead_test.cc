// Room ahead (TickEngineConfig::room_ahead_ns, KVTIER_ROOM_AHEAD_MS): once
// the engine has been quiet for that long, the policy demotes until the
// device has room for the largest recent return. Driven through the shipped
// TickEngine, Mover and LRU policy on an InstantDevice.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "policies/lru.h"
#include "runtime/clock.h"
#include "runtime/tick_engine.h"
#include "tests/testing/instant_device.h"
#include "tests/unit/policy_fixture.h"

namespace kvtier {
namespace {

constexpr size_t kPage = testing::kTestPage;  // 1 MiB
constexpr uint64_t kTick = testing::kTestTickNs;

// One region of 40 pages on a device of 20 (high watermark 18 pages, low
// 15): pages 0..11 resident, page i accessed at tick i + 1 (page 0 the
// coldest), the rest on SSD.
class RoomAheadTest : public ::testing::Test {
 protected:
  void Start(uint64_t room_ahead_ns) {
    auto r = std::make_shared<Region>(1, 0x100000000ull, 40 * kPage, kPage, "kv");
    for (uint32_t p = 0; p < 40; ++p) {
      testing::SetPage(r->pages[p], p < 12 ? 'D' : 'S');
      r->pages[p].last_access = p < 12 ? p + 1 : 0;
    }
    regions_.push_back(r);
    device_.set_capacity(20 * kPage);
    TickEngineConfig config;
    config.tick_ns = kTick;
    config.room_ahead_ns = room_ahead_ns;
    engine_ = std::make_unique<TickEngine>(device_, policy_, clock_, config);
    Tick({});  // the policy learns the pages, nothing moves (12 of 20)
  }
  Region& region() { return *regions_.front(); }
  uint64_t resident_pages() const { return device_.Count(Tier::kDevice); }

  // Pages [first, first + n) came back from `from`: the first by a fault,
  // the rest read ahead (as the host backend reports them).
  std::vector<Signal> Return(uint32_t first, uint32_t n, Tier from = Tier::kDisk) {
    for (uint32_t p = first; p < first + n; ++p) region().pages[p].tier = Tier::kDevice;
    Signal fault{SignalKind::kFault, 1, first, 1, 0};
    fault.from = from;
    Signal ahead{SignalKind::kAccess, 1, first + 1, n - 1, 0};
    ahead.from = from;
    return n > 1 ? std::vector<Signal>{fault, ahead} : std::vector<Signal>{fault};
  }
  TickReport Tick(const std::vector<Signal>& signals) {
    clock_.Set(now_++ * kTick);
    TierBytes usage;
    usage.host_budget = 1000 * kPage;
    usage.disk_budget = 1000 * kPage;
    usage.disk_used = device_.Count(Tier::kDisk) * kPage;
    return engine_->Tick(signals, regions_, usage);
  }
  // Ticks `n` quiet periods; returns the last one's report.
  TickReport Quiet(int n) {
    TickReport report;
    for (int i = 0; i < n; ++i) report = Tick({});
    return report;
  }

  std::vector<RegionPtr> regions_;
  testing::InstantDevice device_{&regions_, kPage};
  LruPolicy policy_;
  ManualClock clock_;
  std::unique_ptr<TickEngine> engine_;
  uint64_t now_ = 0;
};

TEST_F(RoomAheadTest, AfterAReturnAndAQuietSpellTheDeviceKeepsRoomForTheNextOne) {
  Start(30'000'000);    // three quiet periods
  Tick(Return(12, 4));  // 16 of 20: under the high watermark, nothing leaves
  EXPECT_EQ(resident_pages(), 16u);
  // Two quiet periods: not yet (a return's first fault and the pages it
  // reads ahead may be a period apart).
  EXPECT_EQ(Quiet(2).room_ahead, 0u);
  EXPECT_EQ(resident_pages(), 16u);
  EXPECT_EQ(engine_->room_ahead_bytes(), 0u);
  // The third: the return of 4 pages is the reserve, and the device goes
  // down to the high watermark less 4 pages (18 - 4), coldest first.
  TickReport report = Quiet(1);
  EXPECT_EQ(report.room_ahead, 4 * kPage);
  EXPECT_EQ(engine_->room_ahead_bytes(), 4 * kPage);
  EXPECT_EQ(resident_pages(), 14u);
  EXPECT_EQ(region().pages[0].tier.load(), Tier::kHost);
  EXPECT_EQ(region().pages[1].tier.load(), Tier::kHost);
  EXPECT_EQ(region().pages[2].tier.load(), Tier::kDevice);
  // The next return of the same size comes back with no eviction beside it.
  report = Tick(Return(16, 4));
  EXPECT_EQ(report.room_ahead, 0u);
  EXPECT_EQ(report.moves.moves, 0u);
  EXPECT_EQ(resident_pages(), 18u);
}

TEST_F(RoomAheadTest, OffTheWatermarksAloneDecide) {
  Start(0);
  Tick(Return(12, 4));
  EXPECT_EQ(Quiet(10).room_ahead, 0u);
  EXPECT_EQ(resident_pages(), 16u);
  EXPECT_EQ(engine_->room_ahead_bytes(), 0u);
}

TEST_F(RoomAheadTest, NewPagesAreNoReturnButKeepTheEngineBusy) {
  Start(20'000'000);
  // First touches (a new session's prefill) are activity, not a return.
  Tick(Return(12, 4, Tier::kUntouched));
  EXPECT_EQ(Quiet(5).room_ahead, 0u);
  EXPECT_EQ(resident_pages(), 16u);
  // A return, then first touches every period: no room is made while the
  // engine works, however long.
  Tick(Return(16, 2));
  for (uint32_t p = 18; p < 24; ++p) {
    EXPECT_EQ(Tick(Return(p, 1, Tier::kUntouched)).room_ahead, 0u);
  }
}

TEST_F(RoomAheadTest, RoomIsAtMostHalfTheDeviceAndFadesWithSmallerReturns) {
  Start(10'000'000);    // one quiet period
  Tick(Return(12, 6));  // 18 of 20
  EXPECT_EQ(Quiet(1).room_ahead, 6 * kPage);
  EXPECT_EQ(resident_pages(), 12u);
  Tick(Return(18, 14));  // a return larger than half the device (demoted to fit)
  EXPECT_EQ(engine_->room_ahead_bytes(), 6 * kPage);
  EXPECT_EQ(Quiet(1).room_ahead, 10 * kPage);  // the reserve is 14, the room 10
  EXPECT_EQ(engine_->room_ahead_bytes(), 14 * kPage);
  EXPECT_LE(resident_pages(), 8u);
  // A smaller return takes an eighth off the reserve.
  Tick(Return(0, 1, Tier::kHost));
  Quiet(1);
  EXPECT_EQ(engine_->room_ahead_bytes(), 14 * kPage - 14 * kPage / 8);
}

}  // namespace
}  // namespace kvtier
