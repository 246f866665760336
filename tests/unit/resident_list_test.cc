// The residency books every backend shares (runtime/device/resident_list.h):
// eviction order, bytes, and a page's change of tier in the list, the
// resident total and the per-tier gauges.
#include "runtime/device/resident_list.h"

#include <gtest/gtest.h>

#include <vector>

namespace kvtier {
namespace {

struct Owner {};
constexpr uint64_t kPage = 64 << 10;

std::vector<uint32_t> Order(ResidentList<Owner>& list) {
  std::vector<uint32_t> pages;
  for (auto* l = list.Oldest(); l != nullptr; l = list.Newer(l)) pages.push_back(l->page);
  return pages;
}

class ResidentBooks : public ::testing::Test {
 protected:
  ResidentBooks() : records(4), links(4) {
    for (uint32_t p = 0; p < 4; ++p) links[p] = {nullptr, nullptr, &owner, p};
  }
  Tier Move(uint32_t page, Tier to) {
    return MoveTier(records[page], links[page], kPage, to, list, total, counters);
  }
  uint64_t Gauge(const std::atomic<uint64_t>& g) { return Counters::Get(g); }

  Owner owner;
  std::vector<PageRecord> records;
  std::vector<ResidentLink<Owner>> links;
  ResidentList<Owner> list;
  std::atomic<uint64_t> total{0};
  Counters counters;
};

TEST_F(ResidentBooks, PagesLeaveInTheOrderTheyArrivedAndNeverMoveWhileResident) {
  EXPECT_TRUE(list.empty());
  EXPECT_EQ(Move(2, Tier::kDevice), Tier::kUntouched);
  Move(0, Tier::kDevice);
  Move(3, Tier::kDevice);
  EXPECT_EQ(Order(list), (std::vector<uint32_t>{2, 0, 3}));
  EXPECT_EQ(Move(0, Tier::kDevice), Tier::kDevice);  // already there: nothing moves
  EXPECT_EQ(Order(list), (std::vector<uint32_t>{2, 0, 3}));
  Move(2, Tier::kHost);
  Move(2, Tier::kDevice);  // back: newest
  EXPECT_EQ(Order(list), (std::vector<uint32_t>{0, 3, 2}));
  EXPECT_EQ(list.bytes(), 3 * kPage);
  EXPECT_EQ(total.load(), 3 * kPage);
  EXPECT_FALSE(links[1].linked());
  EXPECT_TRUE(links[2].linked());
  EXPECT_EQ(list.Oldest()->owner, &owner);
}

TEST_F(ResidentBooks, EveryTierButTheDiskIsBookedOnItsGauge) {
  Move(0, Tier::kDevice);
  Move(1, Tier::kDevice);
  Move(1, Tier::kHost);
  Move(2, Tier::kHost);
  EXPECT_EQ(Gauge(counters.device_used_bytes), kPage);
  EXPECT_EQ(Gauge(counters.host_used_bytes), 2 * kPage);
  EXPECT_EQ(Gauge(counters.device_peak_bytes), 2 * kPage);
  Move(2, Tier::kDisk);  // the store books disk bytes itself
  EXPECT_EQ(Gauge(counters.host_used_bytes), kPage);
  EXPECT_EQ(Gauge(counters.disk_used_bytes), 0u);
  EXPECT_EQ(records[2].tier.load(), Tier::kDisk);
  Move(2, Tier::kHost);  // and back: no disk bytes taken off
  EXPECT_EQ(Gauge(counters.disk_used_bytes), 0u);
  EXPECT_EQ(Gauge(counters.host_used_bytes), 2 * kPage);
}

TEST_F(ResidentBooks, DroppingARegionsPagesEmptiesTheBooksAndLeavesTheRecords) {
  Move(0, Tier::kDevice);
  Move(1, Tier::kHost);
  Move(3, Tier::kDevice);
  for (uint32_t p = 0; p < 4; ++p) {
    DropFromBooks(records[p], links[p], kPage, list, total, counters);
  }
  EXPECT_TRUE(list.empty());
  EXPECT_EQ(list.bytes(), 0u);
  EXPECT_EQ(total.load(), 0u);
  EXPECT_EQ(Gauge(counters.device_used_bytes), 0u);
  EXPECT_EQ(Gauge(counters.host_used_bytes), 0u);
  EXPECT_EQ(records[0].tier.load(), Tier::kDevice);
}

}  // namespace
}  // namespace kvtier
