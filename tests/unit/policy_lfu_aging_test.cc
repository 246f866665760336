// LfuAgingPolicy: victims by decayed heat, then by last access.
#include <gtest/gtest.h>

#include "policies/lfu_aging.h"
#include "runtime/signal_apply.h"
#include "tests/unit/policy_fixture.h"

namespace kvtier {
namespace {

using testing::MovesTo;
using testing::PolicyBed;

struct Case {
  const char* name;
  std::vector<uint32_t> heat, last_access;
  uint32_t now;
  uint64_t device;  // budget in pages (4 pages used)
  std::vector<std::string> victims;
};

TEST(LfuAgingPolicy, Table) {
  const Case cases[] = {
      {"least heat goes first", {48, 16, 32, 64}, {1, 9, 2, 3}, 10, 4, {"1:1"}},
      {"equal heat: least recently accessed first", {16, 16, 48, 16}, {5, 3, 1, 9}, 10, 4, {"1:1"}},
      {"heat cools: 64 three halvings ago is 8, below a fresh 16",
       {64, 16, 32, 32},
       {1, 190, 190, 190},
       1 + 3 * kHeatDecayTicks,
       4,
       {"1:0"}},
      {"several victims, coldest first (down to the low watermark)",
       {16, 32, 48, 16},
       {2, 1, 1, 1},
       10,
       3,
       {"1:3", "1:0"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    PolicyBed bed;
    Region& r = bed.AddRegion("DDDD");
    for (size_t i = 0; i < 4; ++i) {
      r.pages[i].heat = c.heat[i];
      r.pages[i].last_access = c.last_access[i];
    }
    bed.Advance(c.now - bed.now());
    TieringOptions o;
    o.cross_layer = false;
    o.neighbour_pages = 0;
    LfuAgingPolicy policy(o);
    EXPECT_EQ(MovesTo(bed.Tick(policy, c.device), Tier::kHost), c.victims);
  }
}

}  // namespace
}  // namespace kvtier
