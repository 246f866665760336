// The stats writer never waits for readers: a reader is frozen in the middle
// of copying a snapshot while the writer, another process, keeps publishing.
//
// The freeze is exact, not timed: the reader's mapping of the segment is
// registered with userfaultfd for MINOR faults from its second page on, so
// the reader library's SnapshotCopy reads the sequence word and the first
// page, then blocks in the kernel on its first load from the second page
// until the test resolves the fault. The test sees that fault arrive (the
// reader is then provably inside its copy, holding an old sequence value),
// and while it holds it, the writer's publish count must keep rising. Once
// released, the reader's copy fails its sequence check and it retries: it
// returns a snapshot at least as new as the last publish seen while frozen.
// Thread-safety: the test thread and one reader thread.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/magic.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "kvtier/stats.h"
#include "tests/testing/skip_without.h"
#include "tests/tools/tool_test_util.h"
#include "tools/stats/stats_reader.h"

#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif

namespace kvtier {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr const char* kShmRoot = "/dev/shm";  // MINOR faults need shmem (tmpfs)
constexpr uint64_t kPublishesWhileFrozen = 20;
constexpr int kPublishIntervalMs = 5;

// A directory on tmpfs, removed with its files.
class ShmDir {
 public:
  ShmDir() {
    char tmpl[] = "/dev/shm/kvtier-test.XXXXXX";
    if (mkdtemp(tmpl) != nullptr) path_ = tmpl;
  }
  ~ShmDir() {
    if (path_.empty()) return;
    // Only the publisher's segment can be left here (if it was killed).
    if (DIR* d = opendir(path_.c_str())) {
      while (dirent* e = readdir(d)) {
        if (e->d_name[0] != '.') unlinkat(dirfd(d), e->d_name, 0);
      }
      closedir(d);
    }
    rmdir(path_.c_str());
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A shared read-only mapping of a file, unmapped when it goes.
class Mapping {
 public:
  Mapping(int fd, size_t len)
      : len_(len), addr_(mmap(nullptr, len, PROT_READ, MAP_SHARED, fd, 0)) {}
  ~Mapping() {
    if (addr_ != MAP_FAILED) munmap(addr_, len_);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  bool ok() const { return addr_ != MAP_FAILED; }
  void* get() const { return addr_; }

 private:
  size_t len_;
  void* addr_;
};

// A userfaultfd with MINOR faults on shmem, or -1 (and *why) if this kernel
// or this process cannot have one.
int OpenMinorUffd(std::string* why) {
  int fd = static_cast<int>(syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK));
  if (fd < 0 && errno == EPERM) {
    // Unprivileged processes may still catch user-mode faults (Linux 5.11+),
    // which is all this test needs: the reader faults in user mode.
    fd = static_cast<int>(syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY));
  }
  if (fd < 0) {
    *why = std::string("userfaultfd: ") + strerror(errno);
    return -1;
  }
  uffdio_api api{};
  api.api = UFFD_API;
  api.features = UFFD_FEATURE_MINOR_SHMEM;
  if (ioctl(fd, UFFDIO_API, &api) != 0) {
    *why = std::string("UFFD_FEATURE_MINOR_SHMEM (Linux 5.14+): ") + strerror(errno);
    close(fd);
    return -1;
  }
  return fd;
}

uint64_t LoadSeq(const void* map) {
  const auto* seg = static_cast<const kvtier_stats_segment*>(map);
  return __atomic_load_n(&seg->seq, __ATOMIC_ACQUIRE);
}

TEST(StatsWriterNeverWaitsTest, WriterKeepsPublishingWhileAReaderIsFrozenInItsCopy) {
  struct statfs fs;
  if (statfs(kShmRoot, &fs) != 0 || fs.f_type != TMPFS_MAGIC) {
    KVTIER_SKIP_WITHOUT(
        kShmRoot << " is not a tmpfs; the frozen reader needs MINOR faults on shmem");
  }
  std::string why;
  int uffd = OpenMinorUffd(&why);
  if (uffd < 0) KVTIER_SKIP_WITHOUT("no userfaultfd to freeze the reader with: " << why);
  // Closing the userfaultfd also releases a reader frozen on it.
  struct CloseUffd {
    int* fd;
    ~CloseUffd() {
      if (*fd >= 0) close(*fd);
      *fd = -1;
    }
  } close_uffd{&uffd};
  ShmDir dir;
  ASSERT_FALSE(dir.path().empty()) << "cannot create a directory in " << kShmRoot;

  // The writer: the runtime's StatsSegment in another process, publishing
  // every few milliseconds.
  testing::Child publisher(
      {KVTIER_FAKE_PUBLISHER_BIN, dir.path(), "--interval-ms", std::to_string(kPublishIntervalMs)});
  std::string line;
  ASSERT_TRUE(publisher.ReadLine(&line, seconds(30))) << "the publisher did not start";
  ASSERT_EQ(line, "ready " + std::to_string(publisher.pid()));

  const std::string path = dir.path() + "/kvtier." + std::to_string(publisher.pid());
  // Read-write only because userfaultfd registers a shared mapping only if
  // it could be made writable (VM_MAYWRITE); both mappings are read-only.
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0) << path << ": " << strerror(errno);
  struct stat st;
  ASSERT_EQ(fstat(fd, &st), 0);
  ASSERT_GE(static_cast<size_t>(st.st_size), sizeof(kvtier_stats_segment));
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t len = (sizeof(kvtier_stats_segment) + page - 1) / page * page;
  ASSERT_GE(len, 2 * page) << "the segment must span two pages to freeze a copy half-way";
  const Mapping watch_map(fd, len);
  const Mapping frozen_map(fd, len);
  close(fd);
  ASSERT_TRUE(watch_map.ok() && frozen_map.ok()) << "mmap: " << strerror(errno);
  void* watch = watch_map.get();
  void* frozen = frozen_map.get();

  const uintptr_t trap = reinterpret_cast<uintptr_t>(frozen) + page;
  uffdio_register reg{};
  reg.range.start = trap;
  reg.range.len = len - page;
  reg.mode = UFFDIO_REGISTER_MODE_MINOR;
  ASSERT_EQ(ioctl(uffd, UFFDIO_REGISTER, &reg), 0) << "UFFDIO_REGISTER: " << strerror(errno);

  auto snapshot = std::make_unique<kvtier_stats_segment>();
  std::atomic<bool> returned{false};
  bool copied = false;
  std::thread reader([&] {
    copied = stats::SnapshotCopy(frozen, snapshot.get());
    returned.store(true, std::memory_order_release);
  });
  // However the test ends, the reader is released (the userfaultfd closed)
  // and joined before the mappings go.
  struct Join {
    int* fd;
    std::thread* t;
    ~Join() {
      if (*fd >= 0) close(*fd);
      *fd = -1;
      t->join();
    }
  } join{&uffd, &reader};

  // The reader is frozen once its fault is reported.
  pollfd pfd{uffd, POLLIN, 0};
  ASSERT_EQ(poll(&pfd, 1, 30000), 1) << "the reader never reached the second page";
  uffd_msg msg{};
  ASSERT_EQ(read(uffd, &msg, sizeof msg), static_cast<ssize_t>(sizeof msg));
  ASSERT_EQ(msg.event, UFFD_EVENT_PAGEFAULT);
  EXPECT_TRUE(msg.arg.pagefault.flags & UFFD_PAGEFAULT_FLAG_MINOR);
  EXPECT_EQ(msg.arg.pagefault.address & ~uint64_t{page - 1}, trap)
      << "the copy stopped on its first load from the second page";
  const uint64_t seq_frozen = LoadSeq(watch);

  // The writer goes on publishing while the reader sits in its copy.
  const bool published = testing::PollUntil(
      [&] { return LoadSeq(watch) >= seq_frozen + 2 * kPublishesWhileFrozen; }, seconds(20));
  EXPECT_TRUE(published) << "the writer published " << (LoadSeq(watch) - seq_frozen) / 2
                         << " times in 20 s while a reader was frozen; expected "
                         << kPublishesWhileFrozen;
  EXPECT_FALSE(returned.load(std::memory_order_acquire)) << "the reader was not frozen";
  const uint64_t seq_after = LoadSeq(watch);

  // Release the reader: its copy sees the sequence moved, so it copies again.
  uffdio_continue cont{};
  cont.range.start = trap;
  cont.range.len = len - page;
  ASSERT_EQ(ioctl(uffd, UFFDIO_CONTINUE, &cont), 0) << "UFFDIO_CONTINUE: " << strerror(errno);
  ASSERT_TRUE(
      testing::PollUntil([&] { return returned.load(std::memory_order_acquire); }, seconds(20)))
      << "the reader did not finish its copy once released";
  EXPECT_TRUE(copied) << "the released reader found no consistent snapshot";
  EXPECT_EQ(snapshot->seq % 2, 0u);
  EXPECT_GE(snapshot->seq, seq_after) << "the reader returned a copy older than the writer";
  EXPECT_EQ(snapshot->magic, KVTIER_STATS_MAGIC);
  EXPECT_EQ(snapshot->pid, publisher.pid());
  EXPECT_EQ(publisher.Stop(SIGTERM, seconds(20)), 0);
}

}  // namespace
}  // namespace kvtier
