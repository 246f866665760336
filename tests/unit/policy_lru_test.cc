// LruPolicy decisions from tables of page states.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "policies/lru.h"
#include "tests/unit/policy_fixture.h"

namespace kvtier {
namespace {

constexpr size_t kPage = 1 << 20;

// One region per string; each char is a page, as in policy_fixture.h's
// SetPage. last_access = index in `ages` (a smaller number is colder).
struct Fixture {
  std::vector<RegionPtr> regions;
  void AddRegion(const std::string& pages, const std::vector<uint32_t>& ages) {
    auto r = std::make_shared<Region>(static_cast<RegionId>(regions.size() + 1),
                                      0x100000000ull * (regions.size() + 1), pages.size() * kPage,
                                      kPage, "r");
    for (size_t i = 0; i < pages.size(); ++i) {
      PageRecord& rec = r->pages[i];
      testing::SetPage(rec, pages[i]);
      rec.last_access = i < ages.size() ? ages[i] : 0;
    }
    regions.push_back(r);
  }
  uint64_t Count(char c) const {
    uint64_t n = 0;
    for (const auto& r : regions)
      for (size_t i = 0; i < r->pages.size(); ++i) {
        Tier t = r->pages[i].tier;
        n += (c == 'D' && t == Tier::kDevice) || (c == 'H' && t == Tier::kHost) ||
             (c == 'S' && t == Tier::kDisk);
      }
    return n;
  }
  PolicyView View(uint64_t device_budget_pages, uint64_t host_budget_pages,
                  uint64_t disk_budget_pages) {
    PolicyView v;
    v.now = 100;
    v.regions = &regions;
    auto usage = [](uint64_t used_pages, uint64_t budget_pages) {
      TierUsage u;
      u.used = used_pages * kPage;
      u.budget = budget_pages * kPage;
      u.high = u.budget * 90 / 100;
      u.low = u.budget * 75 / 100;
      return u;
    };
    v.tier[0] = usage(Count('D'), device_budget_pages);
    v.tier[1] = usage(Count('H'), host_budget_pages);
    v.tier[2] = usage(Count('S'), disk_budget_pages);
    return v;
  }
};

struct Case {
  const char* name;
  std::vector<std::string> regions;
  std::vector<std::vector<uint32_t>> ages;
  uint64_t device_budget, host_budget, disk_budget;  // in pages
  std::vector<Move> expected;
};

TEST(LruPolicy, Table) {
  const Case cases[] = {
      {"under the high watermark: nothing moves",
       {"DDDDDDDDD"},
       {{1, 2, 3, 4, 5, 6, 7, 8, 9}},
       10,
       100,
       0,
       {}},
      {"over high: demote coldest down to low (10 used, high 9, low 7.5 -> 3 pages)",
       {"DDDDDDDDDD"},
       {{5, 1, 9, 3, 7, 2, 8, 4, 6, 10}},
       10,
       100,
       0,
       {{1, 1, Tier::kHost}, {1, 5, Tier::kHost}, {1, 3, Tier::kHost}}},
      {"pinned pages are never demoted",
       {"PPPDDDDDDD"},
       {{0, 0, 0, 5, 6, 7, 8, 9, 10, 11}},
       10,
       100,
       0,
       {{1, 3, Tier::kHost}, {1, 4, Tier::kHost}, {1, 5, Tier::kHost}}},
      {"coldest across regions",
       {"DDDDD", "DDDDD"},
       {{10, 11, 12, 13, 14}, {1, 2, 3, 20, 21}},
       10,
       100,
       0,
       {{2, 0, Tier::kHost}, {2, 1, Tier::kHost}, {2, 2, Tier::kHost}}},
      {"host over its watermark spills coldest host pages when a disk tier exists",
       {"HHHH"},
       {{4, 3, 2, 1}},
       10,
       4,
       100,
       {{1, 3, Tier::kDisk}}},
      {"no disk tier: host pressure moves nothing", {"HHHH"}, {{4, 3, 2, 1}}, 10, 4, 0, {}},
      {"spills are limited by disk room", {"HHHHHHHHHH"}, {{}}, 10, 10, 1, {{1, 0, Tier::kDisk}}},
      {"will-need pages are promoted up to the high watermark (9 pages)",
       {"DDDDDDWWWW"},
       {{}},
       10,
       100,
       0,
       {{1, 6, Tier::kDevice}, {1, 7, Tier::kDevice}, {1, 8, Tier::kDevice}}},
  };
  for (const Case& c : cases) {
    Fixture f;
    for (size_t i = 0; i < c.regions.size(); ++i) f.AddRegion(c.regions[i], c.ages[i]);
    LruPolicy policy;
    // Hinted pages got their flag from a WILL_NEED signal, which the policy sees too.
    for (const RegionPtr& r : f.regions) {
      for (uint32_t p = 0; p < r->pages.size(); ++p) {
        if (r->pages[p].flags & kPageWillNeed)
          policy.OnSignal({SignalKind::kWillNeed, r->id, p, 1, 0}, *r);
      }
    }
    Decisions d;
    policy.Decide(f.View(c.device_budget, c.host_budget, c.disk_budget), &d);
    EXPECT_EQ(d.moves, c.expected) << c.name;
  }
}

TEST(LruPolicy, HintedPagesWaitForRoomAcrossTicks) {
  Fixture f;
  f.AddRegion("DDDDDDDDDW", {});
  LruPolicy policy;
  policy.OnSignal({SignalKind::kWillNeed, 1, 9, 1, 0}, *f.regions[0]);
  Decisions d;
  policy.Decide(f.View(10, 100, 0), &d);  // 9 of 10 used: at the high watermark, no room
  EXPECT_TRUE(d.moves.empty());
  f.regions[0]->pages[0].tier = Tier::kHost;  // room appears
  policy.Decide(f.View(10, 100, 0), &d);
  EXPECT_EQ(d.moves, (std::vector<Move>{{1, 9, Tier::kDevice}}))
      << "the hint must survive a tick without room";
}

TEST(LruPolicy, InFlightPagesAreSkipped) {
  Fixture f;
  f.AddRegion("DDDDDDDDDD", {0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  f.regions[0]->pages[0].flags = kPageInFlight;
  LruPolicy policy;
  Decisions d;
  policy.Decide(f.View(10, 100, 0), &d);
  ASSERT_FALSE(d.moves.empty());
  for (const Move& m : d.moves) EXPECT_NE(m.page, 0u);
}

}  // namespace
}  // namespace kvtier
