// The raw mechanics under the simulated GPU: aligned memfd views, and the
// install calls' handling of partial states (PTEs already present, bytes
// already in the memfd). No fault threads here: the test never touches a
// registered page before checking in /proc/self/pagemap that it is mapped,
// so a mistake fails the test instead of hanging it.
#include "runtime/device/memfd/uffd.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "tests/testing/skip_without.h"

namespace kvtier {
namespace {

constexpr size_t kPage = 2 << 20;
constexpr size_t kBase = 4096;

// How many base pages of the range have a present PTE with every bit of
// `bits` set in their /proc/self/pagemap entry (bit 63: present; bit 57:
// write-protected by userfaultfd).
size_t CountEntries(const uint8_t* start, size_t len, uint64_t bits) {
  int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  size_t count = 0;
  for (size_t off = 0; off < len; off += kBase) {
    uint64_t entry = 0;
    const off_t at = static_cast<off_t>((reinterpret_cast<uintptr_t>(start) + off) / kBase * 8);
    count += pread(fd, &entry, sizeof entry, at) == sizeof entry && (entry & bits) == bits;
  }
  close(fd);
  return count;
}
constexpr uint64_t kPresent = uint64_t{1} << 63;
constexpr uint64_t kWriteProtected = kPresent | uint64_t{1} << 57;

// True when every base page of the range has a present PTE.
bool AllMapped(const uint8_t* start, size_t len) {
  return CountEntries(start, len, kPresent) == len / kBase;
}

class UffdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<UserFaultFd> u = UserFaultFd::Open();
    if (!u.ok()) KVTIER_SKIP_WITHOUT(u.status().message());
    uffd_ = std::move(u).value();
    Result<ShmViews> v = ShmViews::Create(kPage, kPage, "kvtier:uffd-test");
    ASSERT_TRUE(v.ok()) << v.status().message();
    views_ = v.value();
    bool zeropage = false;
    ASSERT_TRUE(uffd_.Register(start(), kPage, &zeropage, &protectable_).ok());
    EXPECT_TRUE(zeropage) << "UFFDIO_ZEROPAGE should work on memfd mappings";
    EXPECT_EQ(protectable_, uffd_.write_protect());
  }
  void TearDown() override {
    if (views_.engine) {
      EXPECT_TRUE(uffd_.Unregister(start(), kPage).ok());
    }
    views_.Release();
  }
  uintptr_t start() const { return reinterpret_cast<uintptr_t>(views_.engine); }

  UserFaultFd uffd_;
  ShmViews views_;
  bool protectable_ = false;
};

TEST(ShmViewsTest, EngineViewIsAlignedAndSharesBytesWithTheAlias) {
  for (size_t align : {size_t{64} << 10, size_t{2} << 20}) {
    Result<ShmViews> v = ShmViews::Create(3 * align, align, "kvtier:views-test");
    ASSERT_TRUE(v.ok()) << v.status().message();
    ShmViews views = v.value();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(views.engine) % align, 0u);
    EXPECT_NE(views.engine, views.alias);
    views.alias[3 * align - 1] = 0x5a;
    EXPECT_EQ(views.engine[3 * align - 1], 0x5a);
    uint8_t* engine = views.engine;
    views.Release();
    EXPECT_NE(msync(engine, align, MS_ASYNC), 0) << "the view should be unmapped";
    views.Release();  // idempotent
  }
}

TEST_F(UffdTest, ContinueSkipsPtesThatArePresent) {
  ASSERT_TRUE(uffd_.ZeroFill(start(), kPage).ok());
  memset(views_.alias, 0x11, kPage);
  // Zap all but the first base page: a Continue over the whole page starts
  // on a present PTE (EEXIST) and must map the rest anyway.
  ASSERT_EQ(madvise(views_.engine + kBase, kPage - kBase, MADV_DONTNEED), 0);
  ASSERT_FALSE(AllMapped(views_.engine, kPage));
  ASSERT_TRUE(uffd_.Continue(start(), kPage).ok());
  ASSERT_TRUE(AllMapped(views_.engine, kPage));
  EXPECT_EQ(views_.engine[kPage - 1], 0x11);
  // Zap only the middle: progress, EEXIST part-way, then the rest.
  ASSERT_EQ(madvise(views_.engine + kPage / 2, kBase * 3, MADV_DONTNEED), 0);
  ASSERT_TRUE(uffd_.Continue(start(), kPage).ok());
  ASSERT_TRUE(AllMapped(views_.engine, kPage));
  EXPECT_EQ(views_.engine[kPage / 2 + kBase], 0x11);
}

TEST_F(UffdTest, ZeroFillMapsBytesAlreadyInTheMemfd) {
  // Bytes written through the alias before the first touch must not be
  // lost to a zero fill: the fill maps them instead.
  views_.alias[0] = 7;
  views_.alias[100 * kBase + 5] = 9;
  ASSERT_TRUE(uffd_.ZeroFill(start(), kPage).ok());
  ASSERT_TRUE(AllMapped(views_.engine, kPage));
  EXPECT_EQ(views_.engine[0], 7);
  EXPECT_EQ(views_.engine[100 * kBase + 5], 9);
  EXPECT_EQ(views_.engine[kPage - 1], 0);
}

TEST_F(UffdTest, CopyFillsHolesFromTheSource) {
  std::vector<uint8_t> src(kPage, 0x3c);
  views_.alias[kBase] = 1;  // one base page already has bytes
  ASSERT_TRUE(uffd_.Copy(start(), kPage, src.data()).ok());
  ASSERT_TRUE(AllMapped(views_.engine, kPage));
  EXPECT_EQ(views_.engine[0], 0x3c);
  EXPECT_EQ(views_.engine[kBase], 1);
  EXPECT_EQ(views_.engine[kPage - 1], 0x3c);
}

TEST_F(UffdTest, CopyProtectedMapsEveryPageWriteProtected) {
  if (!protectable_) {
    KVTIER_SKIP_WITHOUT(
        "userfaultfd cannot write-protect shmem here (Linux 5.19+, and "
        "kernel-mode faults caught)");
  }
  std::vector<uint8_t> src(kPage, 0x5e);
  bool all = false;
  ASSERT_TRUE(uffd_.CopyProtected(start(), kPage, src.data(), &all).ok());
  EXPECT_TRUE(all);
  EXPECT_EQ(CountEntries(views_.engine, kPage, kWriteProtected), kPage / kBase);
  EXPECT_EQ(views_.engine[kPage - 1], 0x5e);  // a read raises no fault
  // Lifted, then put back on the mapped pages.
  ASSERT_TRUE(uffd_.Unprotect(start(), kPage).ok());
  EXPECT_EQ(CountEntries(views_.engine, kPage, kWriteProtected), 0u);
  ASSERT_TRUE(AllMapped(views_.engine, kPage));
  ASSERT_TRUE(uffd_.WriteProtect(start(), kPage / 2).ok());
  EXPECT_EQ(CountEntries(views_.engine, kPage, kWriteProtected), kPage / 2 / kBase);
}

TEST_F(UffdTest, CopyProtectedSaysWhenAPageWasMappedAsItWas) {
  if (!protectable_) {
    KVTIER_SKIP_WITHOUT(
        "userfaultfd cannot write-protect shmem here (Linux 5.19+, and "
        "kernel-mode faults caught)");
  }
  std::vector<uint8_t> src(kPage, 0x21);
  views_.alias[3 * kBase] = 4;  // one base page already has bytes
  bool all = true;
  ASSERT_TRUE(uffd_.CopyProtected(start(), kPage, src.data(), &all).ok());
  EXPECT_FALSE(all) << "a page mapped writable must not count as protected";
  ASSERT_TRUE(AllMapped(views_.engine, kPage));
  EXPECT_EQ(views_.engine[3 * kBase], 4);
  EXPECT_EQ(CountEntries(views_.engine, kPage, kWriteProtected), kPage / kBase - 1);
}

TEST_F(UffdTest, ContinueOverAHoleFails) {
  Status s = uffd_.Continue(start(), kPage);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("UFFDIO_CONTINUE"), std::string::npos) << s.message();
  EXPECT_FALSE(AllMapped(views_.engine, kBase));
}

}  // namespace
}  // namespace kvtier
