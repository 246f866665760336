// PosixEnv: the production Env (POSIX calls, liburing through io_queue.cc),
// and AlignedBuffer.
// Thread-safety: PosixEnv is stateless apart from an atomic name counter.
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "runtime/clock.h"
#include "runtime/mutex.h"
#include "runtime/numa_place.h"
#include "runtime/storage/env.h"
#include "runtime/storage/io_queue.h"

namespace kvtier {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;

std::atomic<uint64_t> g_aligned_buffer_bytes{0};  // AlignedBuffer::live_bytes
std::atomic<uint64_t> g_aligned_buffer_peak{0};   // AlignedBuffer::peak_bytes

void UnmapAlignedBuffer(uint8_t* data, size_t size) {
  if (data == nullptr) return;
  munmap(data, size);
  g_aligned_buffer_bytes.fetch_sub(size, std::memory_order_relaxed);
}

Status MakeOneDir(const std::string& path) {
  if (mkdir(path.c_str(), 0700) == 0) return Status::Ok();
  int err = errno;
  struct stat st;
  if (err == EEXIST && stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return Status::Ok();
    return Status::Errorf("%s exists and is not a directory", path.c_str());
  }
  return Status::Errorf("mkdir %s: %s", path.c_str(), strerror(err));
}

class PosixEnv final : public Env {
 public:
  Status CreateDir(const std::string& dir) override {
    if (dir.empty()) return Status::Error("empty directory name");
    // Create missing parents first, each 0700: nobody else needs to list
    // where another user's KV cache spills.
    for (size_t pos = dir.find('/', 1); pos != std::string::npos; pos = dir.find('/', pos + 1)) {
      std::string parent = dir.substr(0, pos);
      struct stat st;
      if (stat(parent.c_str(), &st) == 0) continue;
      Status s = MakeOneDir(parent);
      if (!s.ok()) return s;
    }
    return MakeOneDir(dir);
  }

  Result<int> OpenTmpFile(const std::string& dir, bool direct) override {
    int flags = O_TMPFILE | O_RDWR | O_CLOEXEC | (direct ? O_DIRECT : 0);
    int fd = open(dir.c_str(), flags, 0600);
    if (fd < 0) {
      return Status::Errorf("open(%s, O_TMPFILE%s): %s", dir.c_str(), direct ? "|O_DIRECT" : "",
                            strerror(errno));
    }
    return fd;
  }

  Result<int> OpenUnlinkedFile(const std::string& dir, bool direct) override {
    static std::atomic<uint64_t> counter{0};
    int flags = O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC | (direct ? O_DIRECT : 0);
    for (int attempt = 0; attempt < 100; ++attempt) {
      std::string path = dir + "/.kvtier-spill." + std::to_string(getpid()) + "." +
                         std::to_string(counter.fetch_add(1));
      int fd = open(path.c_str(), flags, 0600);
      if (fd >= 0) {
        if (unlink(path.c_str()) != 0) {
          int err = errno;
          close(fd);
          return Status::Errorf("unlink %s: %s", path.c_str(), strerror(err));
        }
        return fd;
      }
      if (errno != EEXIST) {
        return Status::Errorf("open(%s, O_CREAT|O_EXCL%s): %s", path.c_str(),
                              direct ? "|O_DIRECT" : "", strerror(errno));
      }
    }
    return Status::Errorf("could not find a free spill file name in %s", dir.c_str());
  }

  Status Allocate(int fd, uint64_t offset, uint64_t len) override {
    for (;;) {
      if (fallocate(fd, 0, static_cast<off_t>(offset), static_cast<off_t>(len)) == 0)
        return Status::Ok();
      if (errno == EINTR) continue;
      if (errno == EOPNOTSUPP || errno == ENOSYS) return Status::Ok();
      return Status::Errorf("fallocate(offset %llu, %llu bytes): %s",
                            static_cast<unsigned long long>(offset),
                            static_cast<unsigned long long>(len), strerror(errno));
    }
  }

  void Close(int fd) override {
    if (fd >= 0) close(fd);
  }

  Result<std::unique_ptr<IoQueue>> NewUringQueue(unsigned depth) override {
    return NewPosixUringQueue(depth);
  }
  std::unique_ptr<IoQueue> NewSyncQueue(unsigned depth) override {
    return NewPosixSyncQueue(depth);
  }

  uint64_t NowNanos() override { return MonotonicNs(); }

  Result<std::string> ReadFile(const std::string& path, size_t max_bytes) override {
    // The policy thread reads these; the heap hooks pass its allocations
    // through, so a std::string is fine here.
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Status::Errorf("%s: %s", path.c_str(), strerror(errno));
    std::string text;
    char buf[4096];
    while (text.size() < max_bytes) {
      const ssize_t n = read(fd, buf, std::min(sizeof buf, max_bytes - text.size()));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        const int err = errno;
        close(fd);
        return Status::Errorf("%s: %s", path.c_str(), strerror(err));
      }
      if (n == 0) break;
      text.append(buf, static_cast<size_t>(n));
    }
    close(fd);
    return text;
  }
};

}  // namespace

Env* Env::Default() {
  static PosixEnv* env = new PosixEnv();  // never destroyed: used until exit
  return env;
}

Result<AlignedBuffer> AlignedBuffer::Allocate(size_t bytes) {
  const size_t size = AlignUp(bytes == 0 ? 1 : bytes, kDirectAlign);
  const size_t align = size >= kHugePage ? kHugePage : kDirectAlign;
  // A mapping of its own, not heap memory: it is placed on kvtier's NUMA
  // node (a placement of heap pages would outlive the buffer), and given
  // back whole. Reserved with room to align, then trimmed.
  const size_t reserve = size + align - kDirectAlign;
  void* area = mmap(nullptr, reserve, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (area == MAP_FAILED) {
    return Status::Errorf("allocating a %zu-byte aligned I/O buffer: %s", size, strerror(errno));
  }
  const auto lo = reinterpret_cast<uintptr_t>(area);
  const uintptr_t at = AlignUp(lo, align);
  if (at > lo) munmap(area, at - lo);
  if (lo + reserve > at + size)
    munmap(reinterpret_cast<void*>(at + size), lo + reserve - at - size);
  void* p = reinterpret_cast<void*>(at);
  // Huge pages mean fewer DMA segments per 2 MiB request; best effort.
  if (align == kHugePage) madvise(p, size, MADV_HUGEPAGE);
  PlaceOnMemoryNode(p, size);
  memset(p, 0, size);  // its pages now, on that node, not on the I/O path
  AlignedBuffer b;
  b.data_ = static_cast<uint8_t*>(p);
  b.size_ = size;
  const uint64_t live = g_aligned_buffer_bytes.fetch_add(size, std::memory_order_relaxed) + size;
  uint64_t peak = g_aligned_buffer_peak.load(std::memory_order_relaxed);
  while (live > peak &&
         !g_aligned_buffer_peak.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
  }
  return b;
}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& other) noexcept {
  if (this != &other) {
    UnmapAlignedBuffer(data_, size_);
    data_ = other.data_;
    size_ = other.size_;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

AlignedBuffer::~AlignedBuffer() { UnmapAlignedBuffer(data_, size_); }

uint64_t AlignedBuffer::live_bytes() {
  return g_aligned_buffer_bytes.load(std::memory_order_relaxed);
}

uint64_t AlignedBuffer::peak_bytes() {
  return g_aligned_buffer_peak.load(std::memory_order_relaxed);
}

namespace {

// Never destroyed (not at exit either: a late read may land then too).
struct KeptBuffers {
  Mutex mu;
  std::vector<AlignedBuffer> buffers GUARDED_BY(mu);
};

KeptBuffers& Kept() {
  static auto* kept = new KeptBuffers;
  return *kept;
}

}  // namespace

void KeepForever(AlignedBuffer buffer) {
  if (buffer.data() == nullptr) return;
  KeptBuffers& kept = Kept();
  MutexLock lock(&kept.mu);
  kept.buffers.push_back(std::move(buffer));
}

}  // namespace kvtier
