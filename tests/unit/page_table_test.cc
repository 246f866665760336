// Region/PageTable arithmetic and RegionTable lookups.
#include "runtime/page_table.h"

#include <gtest/gtest.h>

#include "runtime/region_table.h"

namespace kvtier {
namespace {

TEST(Region, PageArithmetic) {
  constexpr size_t kPage = 2 << 20;
  Region r(7, 0x10000000, 5 * kPage + 4096, kPage, "t");
  EXPECT_EQ(r.pages.size(), 6u) << "a partial last page still gets a record";
  EXPECT_EQ(r.PageOf(0x10000000), 0u);
  EXPECT_EQ(r.PageOf(0x10000000 + kPage - 1), 0u);
  EXPECT_EQ(r.PageOf(0x10000000 + kPage), 1u);
  EXPECT_EQ(r.PageAddr(3), 0x10000000 + 3 * kPage);
  EXPECT_EQ(r.PageBytes(0), kPage);
  EXPECT_EQ(r.PageBytes(5), 4096u);
  EXPECT_TRUE(r.Contains(0x10000000 + 5 * kPage + 4095));
  EXPECT_FALSE(r.Contains(0x10000000 + 5 * kPage + 4096));
  EXPECT_FALSE(r.Contains(0x10000000 - 1));
  for (size_t i = 0; i < r.pages.size(); ++i) {
    EXPECT_EQ(r.pages[i].tier.load(), Tier::kUntouched);
    EXPECT_EQ(r.pages[i].flags.load(), 0);
  }
}

TEST(PageTable, RecordsAreCompact) {
  // 1 TiB of 2 MiB pages must fit a few tens of MB.
  EXPECT_LE(sizeof(PageRecord) * ((1ull << 40) >> 21), 32ull << 20);
}

TEST(RegionTable, FindsContainingRegionOnly) {
  RegionTable t;
  t.Insert(std::make_shared<Region>(1, 0x1000000, 0x100000, 0x10000, "a"));
  t.Insert(std::make_shared<Region>(2, 0x3000000, 0x200000, 0x10000, "b"));
  EXPECT_EQ(t.Find(0x1000000)->id, 1u);
  EXPECT_EQ(t.Find(0x10fffff)->id, 1u);
  EXPECT_EQ(t.Find(0x1100000), nullptr) << "one past the end of region 1";
  EXPECT_EQ(t.Find(0xfff), nullptr);
  EXPECT_EQ(t.Find(0x31fffff)->id, 2u);
  EXPECT_EQ(t.FindById(2)->base, 0x3000000u);
  EXPECT_EQ(t.size(), 2u);
  EXPECT_EQ(t.Remove(0x1000001), nullptr) << "removal needs the exact base";
  ASSERT_NE(t.Remove(0x1000000), nullptr);
  EXPECT_EQ(t.Find(0x1000000), nullptr);
  EXPECT_EQ(t.Snapshot().size(), 1u);
}

}  // namespace
}  // namespace kvtier
