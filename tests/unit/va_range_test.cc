// VaRange: spans handed out inside one reservation, aligned, coalesced when
// given back, and the O(1) Contains the free() hook relies on.
#include "runtime/va_range.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstring>

namespace kvtier {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

TEST(VaRange, ContainsNothingBeforeReserve) {
  VaRange range;
  int local = 0;
  EXPECT_FALSE(range.Contains(&local));
  EXPECT_FALSE(range.Contains(nullptr));
  EXPECT_FALSE(range.Take(kMiB, 4096).ok());
}

TEST(VaRange, TakesAlignedSpansInsideTheReservation) {
  VaRange range;
  ASSERT_TRUE(range.Reserve(64 * kMiB).ok());
  Result<uintptr_t> a = range.Take(3 * 65536, 65536);
  Result<uintptr_t> b = range.Take(kMiB, 2 * kMiB);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a.value() % 65536, 0u);
  EXPECT_EQ(b.value() % (2 * kMiB), 0u);
  EXPECT_TRUE(range.Contains(reinterpret_cast<void*>(a.value())));
  EXPECT_TRUE(range.Contains(reinterpret_cast<void*>(b.value() + kMiB - 1)));
  EXPECT_FALSE(range.Contains(reinterpret_cast<void*>(range.lo() + range.size())));
  EXPECT_FALSE(range.Contains(reinterpret_cast<void*>(range.lo() - 1)));
  // The spans do not overlap.
  EXPECT_TRUE(a.value() + 3 * 65536 <= b.value() || b.value() + kMiB <= a.value());
  EXPECT_EQ(range.taken_bytes(), 3 * 65536 + kMiB);
  // A span can be mapped over and used.
  void* m = mmap(reinterpret_cast<void*>(a.value()), 3 * 65536, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  ASSERT_EQ(m, reinterpret_cast<void*>(a.value()));
  memset(m, 0x5a, 3 * 65536);
  range.Give(a.value(), 3 * 65536);
  range.Give(b.value(), kMiB);
  EXPECT_EQ(range.taken_bytes(), 0u);
}

TEST(VaRange, GivenBackSpansCoalesceSoTheWholeRangeIsTakenAgain) {
  VaRange range;
  ASSERT_TRUE(range.Reserve(8 * kMiB).ok());
  uintptr_t spans[8];
  for (auto& s : spans) {
    Result<uintptr_t> t = range.Take(kMiB, 4096);
    ASSERT_TRUE(t.ok()) << t.status().message();
    s = t.value();
  }
  EXPECT_FALSE(range.Take(4096, 4096).ok()) << "the range is full";
  // Back in an order that leaves holes until the last one fills them.
  for (int i : {1, 3, 5, 7, 0, 2, 6, 4}) range.Give(spans[i], kMiB);
  Result<uintptr_t> whole = range.Take(8 * kMiB, 4096);
  ASSERT_TRUE(whole.ok()) << whole.status().message();
  EXPECT_EQ(whole.value(), range.lo());
}

TEST(VaRange, RefusesBadRequestsAndReportsAFullRange) {
  VaRange range;
  ASSERT_TRUE(range.Reserve(kMiB).ok());
  EXPECT_FALSE(range.Take(0, 4096).ok());
  EXPECT_FALSE(range.Take(4096, 3).ok());
  Result<uintptr_t> big = range.Take(2 * kMiB, 4096);
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("has no room"), std::string::npos)
      << big.status().message();
}

TEST(VaRange, PlainBlocksAreFoundAndFreedOnce) {
  VaRange range;
  ASSERT_TRUE(range.Reserve(4 * kMiB).ok());
  Result<uintptr_t> a = range.Take(kMiB, 4096);
  ASSERT_TRUE(a.ok());
  range.LockForFork();  // as a fork child adopts its copies
  range.AdoptPlainForkLocked(a.value(), kMiB);
  range.UnlockAfterFork();
  const void* p = reinterpret_cast<void*>(a.value());
  EXPECT_EQ(range.PlainBytes(p), kMiB);
  EXPECT_EQ(range.PlainBytes(reinterpret_cast<void*>(a.value() + 4096)), 0u);
  EXPECT_TRUE(range.FreePlain(p));
  EXPECT_FALSE(range.FreePlain(p)) << "a second free finds nothing";
  EXPECT_EQ(range.taken_bytes(), 0u);
}

}  // namespace
}  // namespace kvtier
