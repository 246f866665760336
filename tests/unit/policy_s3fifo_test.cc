// S3FifoPolicy: small, main and ghost queues, driven by event scripts.
#include <gtest/gtest.h>

#include "policies/s3fifo.h"
#include "tests/unit/policy_fixture.h"

namespace kvtier {
namespace {

using testing::MovesTo;
using testing::PolicyBed;

TieringOptions Plain() {
  TieringOptions o;
  o.cross_layer = false;
  o.neighbour_pages = 0;
  return o;
}

// Ten pages arrive by first touch in page order on a device of `device` pages.
struct Bed {
  PolicyBed bed;
  S3FifoPolicy policy{Plain()};
  explicit Bed(uint32_t pages) { bed.AddRegion(std::string(pages, 'U')); }
  void Arrive(uint32_t from, uint32_t to) {
    for (uint32_t p = from; p < to; ++p) bed.Fault(policy, 1, p);
    bed.Advance();
  }
  std::vector<std::string> Evict(uint64_t device) {
    auto v = MovesTo(bed.Tick(policy, device), Tier::kHost);
    bed.Advance();
    return v;
  }
};

TEST(S3FifoPolicy, NewPagesLeaveTheSmallQueueInArrivalOrder) {
  Bed b(12);
  b.Arrive(0, 10);
  EXPECT_EQ(b.Evict(10), (std::vector<std::string>{"1:0", "1:1", "1:2"}));
}

TEST(S3FifoPolicy, PageAccessedTwiceInSmallMovesToMainAndStays) {
  Bed b(12);
  b.Arrive(0, 10);
  b.bed.Send(b.policy, SignalKind::kAccess, 1, 0);
  b.bed.Send(b.policy, SignalKind::kAccess, 1, 0);
  b.bed.Send(b.policy, SignalKind::kAccess, 1, 1);  // once only: not enough
  EXPECT_EQ(b.Evict(10), (std::vector<std::string>{"1:1", "1:2", "1:3"}));
}

TEST(S3FifoPolicy, GhostHitEntersMainAndOutlivesNewPages) {
  Bed b(20);
  b.Arrive(0, 10);
  ASSERT_EQ(b.Evict(10), (std::vector<std::string>{"1:0", "1:1", "1:2"}));
  b.Arrive(0, 1);    // page 0 faults back: remembered by the ghost queue -> main
  b.Arrive(10, 13);  // three new pages -> small
  // 11 resident on 10: demote to 7.5 -> 4 pages, all from small (0 is in main).
  std::vector<std::string> v = b.Evict(10);
  EXPECT_EQ(v, (std::vector<std::string>{"1:3", "1:4", "1:5", "1:6"}));
}

TEST(S3FifoPolicy, MainGivesAccessedPagesAnotherRound) {
  Bed b(20);
  b.Arrive(0, 10);
  b.Evict(10);     // 0, 1, 2 -> ghost
  b.Arrive(0, 3);  // all three back -> main (main: 0 1 2)
  // Empty the small queue so eviction comes from main.
  std::vector<std::string> v = b.Evict(4);  // 10 resident on 4: down to 3 -> 7 pages
  EXPECT_EQ(v, (std::vector<std::string>{"1:3", "1:4", "1:5", "1:6", "1:7", "1:8", "1:9"}));
  b.bed.Send(b.policy, SignalKind::kAccess, 1, 0);  // 0 gets a second round
  b.bed.Advance();
  EXPECT_EQ(b.Evict(2), (std::vector<std::string>{"1:1", "1:2"}));
}

}  // namespace
}  // namespace kvtier
