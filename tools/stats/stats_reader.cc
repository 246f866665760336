// Reader side of the stats segments (see stats_reader.h). The ordering rules
// of the sequence lock are described in runtime/stats_segment.cc; this side
// loads every word of the mapping atomically (the writer stores atomically),
// so a copy that races with a write is detected, never undefined.
#include "tools/stats/stats_reader.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstddef>
#include <cstdio>
#include <cstring>

#include "tools/stats/process_check.h"

namespace kvtier::stats {
namespace {

static_assert(sizeof(kvtier_stats_segment) % sizeof(uint64_t) == 0,
              "the segment is copied as 64-bit words");
constexpr size_t kWords = sizeof(kvtier_stats_segment) / sizeof(uint64_t);
constexpr size_t kSeqWord = offsetof(kvtier_stats_segment, seq) / sizeof(uint64_t);
constexpr size_t kHeaderBytes = offsetof(kvtier_stats_segment, seq);  // magic, version, size

std::string Printf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string Printf(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

// Waits a little longer after each failed attempt: spin first (the writer
// holds the lock for microseconds), then yield, then sleep, so a stopped
// writer costs the reader at most a fraction of a second.
void Backoff(int attempt) {
  if (attempt < 16) return;
  if (attempt < 200) {
    sched_yield();
    return;
  }
  timespec ts{0, 100 * 1000};
  nanosleep(&ts, nullptr);
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

class Mapping {
 public:
  Mapping(void* addr, size_t len) : addr_(addr), len_(len) {}
  ~Mapping() {
    if (addr_ != MAP_FAILED) munmap(addr_, len_);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  const void* get() const { return addr_; }
  bool ok() const { return addr_ != MAP_FAILED; }

 private:
  void* addr_;
  size_t len_;
};

}  // namespace

const char* ReadStateName(ReadState state) {
  switch (state) {
    case ReadState::kOk:
      return "ok";
    case ReadState::kGone:
      return "gone";
    case ReadState::kStaleRemoved:
      return "stale";
    case ReadState::kNotReady:
      return "not ready";
    case ReadState::kBusy:
      return "busy";
    case ReadState::kRefused:
      return "refused";
    case ReadState::kError:
      return "error";
  }
  return "?";
}

bool SnapshotCopy(const void* mapped, kvtier_stats_segment* out, int tries) {
  const auto* words = static_cast<const uint64_t*>(mapped);
  auto* dst = reinterpret_cast<unsigned char*>(out);
  for (int attempt = 0; attempt < tries; ++attempt) {
    const uint64_t s1 = __atomic_load_n(&words[kSeqWord], __ATOMIC_ACQUIRE);
    if ((s1 & 1) == 0) {
      for (size_t i = 0; i < kWords; ++i) {
        const uint64_t w = __atomic_load_n(&words[i], __ATOMIC_RELAXED);
        memcpy(dst + i * sizeof w, &w, sizeof w);
      }
      std::atomic_thread_fence(std::memory_order_acquire);
      const uint64_t s2 = __atomic_load_n(&words[kSeqWord], __ATOMIC_RELAXED);
      if (s1 == s2) {
        out->seq = s1;
        return true;
      }
    }
    Backoff(attempt);
  }
  return false;
}

std::unique_ptr<SegmentDir> SegmentDir::Open(const std::string& path, std::string* error) {
  int fd = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    *error = Printf(
        "%s: cannot open the stats directory: %s (pass the directory kvtier "
        "processes publish in, default %s)",
        path.c_str(), strerror(errno), kDefaultDir);
    return nullptr;
  }
  return std::unique_ptr<SegmentDir>(new SegmentDir(fd, path));
}

SegmentDir::~SegmentDir() { close(fd_); }

std::vector<int32_t> SegmentDir::List() const {
  std::vector<int32_t> pids;
  // A fresh open file description: a dup would share the directory offset
  // with other threads listing at the same time.
  int fd = openat(fd_, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return pids;
  DIR* d = fdopendir(fd);
  if (d == nullptr) {
    close(fd);
    return pids;
  }
  const size_t prefix_len = strlen(KVTIER_STATS_PREFIX);
  while (dirent* e = readdir(d)) {
    if (strncmp(e->d_name, KVTIER_STATS_PREFIX, prefix_len) != 0) continue;
    const char* digits = e->d_name + prefix_len;
    if (*digits == '\0' || *digits == '0' || strlen(digits) > 10) continue;
    if (strspn(digits, "0123456789") != strlen(digits)) continue;
    const long long pid = strtoll(digits, nullptr, 10);
    if (pid > 0 && pid <= INT32_MAX) pids.push_back(static_cast<int32_t>(pid));
  }
  closedir(d);
  std::sort(pids.begin(), pids.end());
  return pids;
}

bool SegmentDir::RemoveIfSame(const std::string& name, int fd) const {
  struct stat open_st, path_st;
  if (fstat(fd, &open_st) != 0) return false;
  if (fstatat(fd_, name.c_str(), &path_st, AT_SYMLINK_NOFOLLOW) != 0) return false;
  if (open_st.st_dev != path_st.st_dev || open_st.st_ino != path_st.st_ino) return false;
  return unlinkat(fd_, name.c_str(), 0) == 0;
}

ReadResult SegmentDir::Read(int32_t pid) const {
  ReadResult r;
  r.pid = pid;
  r.name = KVTIER_STATS_PREFIX + std::to_string(pid);
  const char* dir = path_.c_str();
  const char* name = r.name.c_str();
  Fd fd(openat(fd_, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  if (fd.get() < 0) {
    const int err = errno;
    if (err == ENOENT) {
      r.state = ReadState::kGone;
      r.message = Printf("%s/%s: gone (the process exited)", dir, name);
    } else if (err == ELOOP) {
      r.state = ReadState::kRefused;
      r.message =
          Printf("%s/%s: a symbolic link, which kvtier never creates (remove it)", dir, name);
    } else if (err == EACCES || err == EPERM) {
      r.state = ReadState::kError;
      r.message = Printf(
          "%s/%s: permission denied (segments are private to their user; run "
          "as the user of process %d or as root)",
          dir, name, pid);
    } else {
      r.state = ReadState::kError;
      r.message = Printf("%s/%s: cannot open: %s", dir, name, strerror(err));
    }
    return r;
  }
  struct stat st;
  if (fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    r.state = ReadState::kRefused;
    r.message = Printf("%s/%s: not a regular file (remove it)", dir, name);
    return r;
  }
  auto stale = [&](const char* why) {
    r.state = ReadState::kStaleRemoved;
    const bool removed = RemoveIfSame(r.name, fd.get());
    r.message =
        Printf("%s/%s: %s; %s", dir, name, why,
               removed ? "removed the stale segment" : "could not remove the stale segment");
    return r;
  };
  if (!PidExists(pid)) return stale("its process is gone");

  const size_t file_size = static_cast<size_t>(st.st_size);
  if (file_size < kHeaderBytes) {
    r.state = ReadState::kNotReady;
    r.message = Printf("%s/%s: being created", dir, name);
    return r;
  }
  const size_t map_len = std::min(file_size, sizeof(kvtier_stats_segment));
  Mapping map(mmap(nullptr, map_len, PROT_READ, MAP_SHARED, fd.get(), 0), map_len);
  if (!map.ok()) {
    r.state = ReadState::kError;
    r.message = Printf("%s/%s: cannot map: %s", dir, name, strerror(errno));
    return r;
  }
  // magic, version and size never change after the writer's first publish.
  const auto* words = static_cast<const uint64_t*>(map.get());
  struct {
    uint64_t magic;
    uint32_t version;
    uint32_t size;
  } header;
  static_assert(sizeof header == kHeaderBytes);
  const uint64_t head[2] = {__atomic_load_n(&words[0], __ATOMIC_ACQUIRE),
                            __atomic_load_n(&words[1], __ATOMIC_RELAXED)};
  memcpy(&header, head, sizeof header);
  if (header.magic == 0) {
    r.state = ReadState::kNotReady;
    r.message = Printf("%s/%s: being created", dir, name);
    return r;
  }
  if (header.magic != KVTIER_STATS_MAGIC) {
    r.state = ReadState::kRefused;
    r.message = Printf("%s/%s: not a kvtier stats segment (magic %#llx, expected %#llx)", dir, name,
                       static_cast<unsigned long long>(header.magic), KVTIER_STATS_MAGIC);
    return r;
  }
  if (header.version != KVTIER_STATS_VERSION) {
    r.state = ReadState::kRefused;
    r.message = Printf(
        "%s/%s: stats layout version %u, but this tool reads version %u (use the "
        "kvtier tools of the same release as process %d)",
        dir, name, header.version, KVTIER_STATS_VERSION, pid);
    return r;
  }
  if (header.size != sizeof(kvtier_stats_segment) || file_size < sizeof(kvtier_stats_segment)) {
    r.state = ReadState::kRefused;
    r.message = Printf(
        "%s/%s: layout size %u bytes (file %zu), but version %u here is %zu bytes "
        "(process %d and this tool come from different builds; rebuild them together)",
        dir, name, header.size, file_size, KVTIER_STATS_VERSION, sizeof(kvtier_stats_segment), pid);
    return r;
  }
  auto snapshot = std::make_shared<kvtier_stats_segment>();
  if (!SnapshotCopy(map.get(), snapshot.get())) {
    r.state = ReadState::kBusy;
    r.message = Printf(
        "%s/%s: the writer held the sequence lock through %d attempts (is process "
        "%d stopped?)",
        dir, name, kSnapshotTries, pid);
    return r;
  }
  if (snapshot->pid != pid) {
    r.state = ReadState::kRefused;
    r.message = Printf("%s/%s: holds the statistics of pid %d, not %d (a copied file; remove it)",
                       dir, name, snapshot->pid, pid);
    return r;
  }
  switch (CheckProcess(pid, snapshot->start_ticks)) {
    case Liveness::kDead:
      return stale("its process is gone");
    case Liveness::kReused:
      return stale("its pid now belongs to another process");
    case Liveness::kAlive:
      break;
  }
  r.state = ReadState::kOk;
  r.snapshot = std::move(snapshot);
  return r;
}

std::vector<ReadResult> SegmentDir::ReadAll(int32_t only_pid) const {
  std::vector<ReadResult> out;
  for (int32_t pid : List()) {
    if (only_pid > 0 && pid != only_pid) continue;
    ReadResult r = Read(pid);
    if (r.state != ReadState::kGone) out.push_back(std::move(r));
  }
  return out;
}

}  // namespace kvtier::stats
