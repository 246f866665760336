// Tests of the storage Env seam: directory creation, anonymous files, both
// I/O queues, and FaultEnv's determinism.
#include "runtime/storage/env.h"

#include <errno.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <memory>

#include "runtime/storage/fault_env.h"
#include "storage_test_util.h"

namespace kvtier {
namespace {

using storage_test::Pattern;
using storage_test::TempDir;

mode_t ModeOf(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 ? (st.st_mode & 07777) : 0;
}

TEST(EnvTest, CreateDirMakesMissingParentsWithMode0700) {
  TempDir tmp;
  ASSERT_TRUE(tmp.ok());
  Env* env = Env::Default();
  std::string dir = tmp.path() + "/a/b";
  ASSERT_TRUE(env->CreateDir(dir).ok());
  EXPECT_EQ(ModeOf(tmp.path() + "/a"), 0700u);
  EXPECT_EQ(ModeOf(dir), 0700u);
  EXPECT_TRUE(env->CreateDir(dir).ok()) << "an existing directory is fine";

  std::string file = tmp.path() + "/plain";
  int fd = open(file.c_str(), O_CREAT | O_WRONLY, 0600);
  ASSERT_GE(fd, 0);
  close(fd);
  Status st = env->CreateDir(file);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("not a directory"), std::string::npos) << st.message();
}

TEST(EnvTest, SpillFilesHaveNoName) {
  TempDir tmp;
  ASSERT_TRUE(tmp.ok());
  Env* env = Env::Default();
  Result<int> a = env->OpenTmpFile(tmp.path(), false);
  Result<int> b = env->OpenUnlinkedFile(tmp.path(), false);
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_TRUE(b.ok()) << b.status().message();
  for (int fd : {a.value(), b.value()}) ASSERT_EQ(pwrite(fd, "data", 4, 0), 4);
  EXPECT_TRUE(tmp.Entries().empty());
  env->Close(a.value());
  env->Close(b.value());
}

// Writes 8 pages at queue depth 4, reads them back, and checks each
// completion carries its request's user_data.
void RoundTrip(IoQueue* q, int fd) {
  constexpr size_t kLen = 16384;
  constexpr int kPages = 8;
  Result<AlignedBuffer> out = AlignedBuffer::Allocate(kLen * kPages);
  Result<AlignedBuffer> in = AlignedBuffer::Allocate(kLen * kPages);
  ASSERT_TRUE(out.ok() && in.ok());
  std::vector<uint8_t> data = Pattern(kLen * kPages, 5);
  memcpy(out.value().data(), data.data(), data.size());
  for (IoKind kind : {IoKind::kWrite, IoKind::kRead}) {
    for (int base = 0; base < kPages; base += 4) {
      std::vector<IoRequest> reqs;
      for (int i = base; i < base + 4; ++i) {
        IoRequest r;
        r.kind = kind;
        r.fd = fd;
        r.buf = (kind == IoKind::kWrite ? out : in).value().data() + i * kLen;
        r.len = kLen;
        r.offset = uint64_t(i) * kLen;
        r.user_data = 100 + i;
        reqs.push_back(r);
      }
      ASSERT_TRUE(q->Submit(reqs.data(), reqs.size()).ok());
      std::vector<IoCompletion> done;
      while (done.size() < 4) ASSERT_TRUE(q->Wait(1, &done).ok());
      ASSERT_EQ(done.size(), 4u);
      for (const IoCompletion& c : done) {
        EXPECT_GE(c.user_data, 100u + base);
        EXPECT_LT(c.user_data, 104u + base);
        EXPECT_EQ(c.result, int64_t(kLen));
      }
    }
  }
  EXPECT_EQ(memcmp(in.value().data(), data.data(), data.size()), 0);
}

TEST(EnvTest, UringAndPreadQueuesRoundTrip) {
  TempDir tmp;
  ASSERT_TRUE(tmp.ok());
  Env* env = Env::Default();
  Result<int> fd = env->OpenTmpFile(tmp.path(), false);
  ASSERT_TRUE(fd.ok()) << fd.status().message();
  Result<std::unique_ptr<IoQueue>> uring = env->NewUringQueue(4);
  if (uring.ok()) {
    SCOPED_TRACE("io_uring");
    RoundTrip(uring.value().get(), fd.value());
  } else {
    // Sandboxes may refuse io_uring; the store then falls back (tested there).
    std::printf("io_uring unavailable here: %s\n", uring.status().message().c_str());
  }
  {
    SCOPED_TRACE("pread");
    std::unique_ptr<IoQueue> sync = env->NewSyncQueue(4);
    RoundTrip(sync.get(), fd.value());
  }
  env->Close(fd.value());
}

// The fate of each write under a 30% EIO rate, as a string of 0/1.
std::string WriteFates(uint64_t seed, const std::string& dir) {
  FaultEnv env(Env::Default(), seed);
  Result<int> fd = env.OpenTmpFile(dir, false);
  if (!fd.ok()) return "open failed";
  env.SetRate(Fault::kWriteIoError, 0.3);
  std::unique_ptr<IoQueue> q = env.NewSyncQueue(1);
  std::string fates;
  char byte = 'x';
  for (int i = 0; i < 64; ++i) {
    IoRequest r;
    r.kind = IoKind::kWrite;
    r.fd = fd.value();
    r.buf = &byte;
    r.len = 1;
    r.offset = i;
    std::vector<IoCompletion> done;
    if (!q->Submit(&r, 1).ok() || !q->Wait(1, &done).ok() || done.size() != 1)
      return "queue failed";
    fates += done[0].result == -EIO ? '1' : '0';
  }
  env.Close(fd.value());
  return fates;
}

TEST(FaultEnvTest, SameSeedSameFaults) {
  TempDir tmp;
  ASSERT_TRUE(tmp.ok());
  std::string a = WriteFates(42, tmp.path());
  EXPECT_EQ(a, WriteFates(42, tmp.path()));
  EXPECT_NE(a, WriteFates(43, tmp.path()));
  EXPECT_NE(a.find('1'), std::string::npos);
  EXPECT_NE(a.find('0'), std::string::npos);
}

TEST(FaultEnvTest, ArmSkipsThenFiresTimes) {
  FaultEnv env(Env::Default());
  env.Arm(Fault::kReadIoError, 2, 1);
  std::string fates;
  for (int i = 0; i < 5; ++i) fates += env.Fires(Fault::kReadIoError) ? '1' : '0';
  EXPECT_EQ(fates, "01100");
  env.Arm(Fault::kReadIoError, -1);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(env.Fires(Fault::kReadIoError));
  env.Clear();
  EXPECT_FALSE(env.Fires(Fault::kReadIoError));
}

// Every AlignedBuffer alive is counted while it lives, moves keep the count,
// and the peak holds the most there was.
TEST(AlignedBufferTest, LiveBytesCountEveryBufferUntilItIsGone) {
  const uint64_t before = AlignedBuffer::live_bytes();
  {
    Result<AlignedBuffer> big = AlignedBuffer::Allocate((size_t{3} << 20) + 1);
    Result<AlignedBuffer> small = AlignedBuffer::Allocate(100);
    ASSERT_TRUE(big.ok() && small.ok());
    EXPECT_EQ(big.value().size(), (size_t{3} << 20) + 4096);  // rounded up to 4 KiB
    EXPECT_EQ(AlignedBuffer::live_bytes(), before + big.value().size() + 4096);
    EXPECT_GE(AlignedBuffer::peak_bytes(), AlignedBuffer::live_bytes());
    AlignedBuffer moved = std::move(big).value();
    EXPECT_EQ(AlignedBuffer::live_bytes(), before + moved.size() + 4096);
    moved = std::move(small).value();  // the 3 MiB one is unmapped
    EXPECT_EQ(AlignedBuffer::live_bytes(), before + 4096);
  }
  EXPECT_EQ(AlignedBuffer::live_bytes(), before);
  EXPECT_GE(AlignedBuffer::peak_bytes(), before + (size_t{3} << 20) + 2 * 4096);
}

}  // namespace
}  // namespace kvtier
