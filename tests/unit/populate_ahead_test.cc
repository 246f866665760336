// PopulateAhead: which blocks a first touch populates ahead, which of them
// are queued for reclaim (once each, unclaimed only, oldest first, bounded),
// and the allocator's front that says which were handed out.
#include "policies/populate_ahead.h"

#include <gtest/gtest.h>

#include <set>
#include <vector>

namespace kvtier {
namespace {

auto AllUnclaimed() {
  return [](uint32_t) { return true; };
}

std::vector<uint64_t> Drain(PopulateAhead& book) {
  std::vector<uint64_t> out;
  while (!book.empty()) {
    out.push_back(book.front());
    book.PopFront();
  }
  return out;
}

TEST(PopulateAhead, AFirstTouchPopulatesTheNextBlocksWithinItsRegion) {
  PopulateAhead book;
  std::vector<uint64_t> ahead;
  book.OnFirstTouch(7, 3, 100, 4, AllUnclaimed(), &ahead);
  EXPECT_EQ(ahead,
            (std::vector<uint64_t>{PageKey(7, 4), PageKey(7, 5), PageKey(7, 6), PageKey(7, 7)}));
  // Near the region's end: only what is left of it.
  ahead.clear();
  book.OnFirstTouch(7, 97, 100, 4, AllUnclaimed(), &ahead);
  EXPECT_EQ(ahead, (std::vector<uint64_t>{PageKey(7, 98), PageKey(7, 99)}));
  ahead.clear();
  book.OnFirstTouch(7, 99, 100, 4, AllUnclaimed(), &ahead);
  EXPECT_TRUE(ahead.empty());
}

TEST(PopulateAhead, OverlappingFirstTouchesQueueEachBlockOnce) {
  PopulateAhead book;
  std::vector<uint64_t> ahead;
  // A prefill's first touches, one block apart, each populating four ahead.
  for (uint32_t page = 0; page < 4; ++page) {
    book.OnFirstTouch(1, page, 64, 4, AllUnclaimed(), &ahead);
  }
  EXPECT_EQ(ahead.size(), 16u) << "every touch asks for its four";
  std::vector<uint64_t> expected;
  for (uint32_t page = 1; page <= 7; ++page) expected.push_back(PageKey(1, page));
  EXPECT_EQ(Drain(book), expected) << "blocks 1..7, once each, oldest first";
}

TEST(PopulateAhead, OnlyUnclaimedBlocksAreQueued) {
  PopulateAhead book;
  std::vector<uint64_t> ahead;
  const std::set<uint32_t> claimed = {2, 4};  // a group holds them, or they were written
  book.OnFirstTouch(
      1, 0, 64, 5, [&](uint32_t page) { return !claimed.count(page); }, &ahead);
  EXPECT_EQ(ahead.size(), 5u) << "claimed blocks are still populated";
  EXPECT_EQ(Drain(book), (std::vector<uint64_t>{PageKey(1, 1), PageKey(1, 3), PageKey(1, 5)}));
}

TEST(PopulateAhead, RegionsKeepTheirOwnFronts) {
  PopulateAhead book;
  std::vector<uint64_t> ahead;
  book.OnFirstTouch(1, 0, 64, 2, AllUnclaimed(), &ahead);
  book.OnFirstTouch(2, 10, 64, 2, AllUnclaimed(), &ahead);
  // Region 1's queue front does not hold back region 2's blocks.
  book.OnFirstTouch(2, 0, 64, 2, AllUnclaimed(), &ahead);
  EXPECT_EQ(Drain(book),
            (std::vector<uint64_t>{PageKey(1, 1), PageKey(1, 2), PageKey(2, 11), PageKey(2, 12)}))
      << "region 2's front is past block 2 already (queued up to 12)";
}

TEST(PopulateAhead, ABlockIsHandedOutOnceAFirstTouchReachesIt) {
  PopulateAhead book;
  std::vector<uint64_t> ahead;
  EXPECT_FALSE(book.HandedOut(PageKey(1, 0))) << "no first touch in the region yet";
  book.OnFirstTouch(1, 0, 64, 4, AllUnclaimed(), &ahead);
  EXPECT_TRUE(book.HandedOut(PageKey(1, 0)));
  EXPECT_FALSE(book.HandedOut(PageKey(1, 1))) << "populated ahead, not yet written";
  book.OnFirstTouch(1, 3, 64, 4, AllUnclaimed(), &ahead);
  EXPECT_TRUE(book.HandedOut(PageKey(1, 1))) << "behind the front: the allocator handed it out";
  EXPECT_TRUE(book.HandedOut(PageKey(1, 3)));
  EXPECT_FALSE(book.HandedOut(PageKey(1, 4)));
  // A touch behind the front does not move it back.
  book.OnFirstTouch(1, 1, 64, 4, AllUnclaimed(), &ahead);
  EXPECT_TRUE(book.HandedOut(PageKey(1, 3)));
  EXPECT_FALSE(book.HandedOut(PageKey(2, 0))) << "another region's front";
}

TEST(PopulateAhead, TheQueueKeepsItsNewestBlocksWithinItsBound) {
  PopulateAhead book(3);
  std::vector<uint64_t> ahead;
  book.OnFirstTouch(1, 0, 64, 2, AllUnclaimed(), &ahead);
  book.front_layer() = 5;  // the front's reclaim has come to layer 5
  book.OnFirstTouch(1, 2, 64, 2, AllUnclaimed(), &ahead);  // queues 3 and 4: one too many
  EXPECT_EQ(book.size(), 3u);
  EXPECT_EQ(book.front(), PageKey(1, 2)) << "the oldest went";
  EXPECT_EQ(book.front_layer(), 0u) << "the new front's reclaim starts at its first layer";
  EXPECT_EQ(Drain(book), (std::vector<uint64_t>{PageKey(1, 2), PageKey(1, 3), PageKey(1, 4)}));
}

TEST(PopulateAhead, PoppingTheFrontRestartsTheLayerWalk) {
  PopulateAhead book;
  std::vector<uint64_t> ahead;
  book.OnFirstTouch(1, 0, 64, 2, AllUnclaimed(), &ahead);
  book.front_layer() = 3;
  book.PopFront();
  EXPECT_EQ(book.front(), PageKey(1, 2));
  EXPECT_EQ(book.front_layer(), 0u);
}

}  // namespace
}  // namespace kvtier
