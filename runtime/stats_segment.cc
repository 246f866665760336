// StatsSegment: writes the shared-memory statistics segment (stats.h).
//
// Memory ordering. The segment is a sequence lock over 64-bit words, and
// every access to the shared mapping is an atomic word access (std::atomic_ref
// here, __atomic loads in the reader), so writer and readers never race in
// the C++ sense:
//   writer: seq.store(s + 1, relaxed); atomic_thread_fence(release);
//           each payload word: store(relaxed);
//           seq.store(s + 2, release);
//   reader: s1 = seq.load(acquire); odd: retry;
//           each payload word: load(relaxed);
//           atomic_thread_fence(acquire); s2 = seq.load(relaxed);
//           s1 == s2: the copy is consistent.
// If the reader's copy contains any word stored by a write that began after
// its s1, the writer's release fence (after the odd store) pairs with the
// reader's acquire fence (after the copy), so the re-read sees at least that
// odd value and s2 != s1. If s1 is the even value ending write k, the release
// store of s1 makes all of write k's words visible to the copy. Either way a
// snapshot with s1 == s2 holds exactly one publish.
// Thread-safety: see stats_segment.h.
#include "runtime/stats_segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <set>

#include "runtime/proc_stat.h"

namespace kvtier {
namespace {

static_assert(sizeof(kvtier_stats_segment) % sizeof(uint64_t) == 0,
              "the segment is copied as 64-bit words");
static_assert(offsetof(kvtier_stats_segment, seq) % sizeof(uint64_t) == 0);
static_assert(std::atomic_ref<uint64_t>::required_alignment <= alignof(uint64_t));
static_assert(static_cast<int>(Tier::kUntouched) == 3, "stats.h tier codes");

constexpr size_t kWords = sizeof(kvtier_stats_segment) / sizeof(uint64_t);
constexpr size_t kSeqWord = offsetof(kvtier_stats_segment, seq) / sizeof(uint64_t);

uint64_t RealtimeNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return uint64_t(ts.tv_sec) * 1000000000u + uint64_t(ts.tv_nsec);
}

uint64_t SelfStartTicks() { return ProcStartTicks("/proc/self/stat"); }

void CopyString(char* dst, size_t cap, const std::string& src) {
  // Zero-padded and always terminated: readers take the field as it is.
  memset(dst, 0, cap);
  src.copy(dst, std::min(src.size(), cap - 1));
}

// Paths of the segments this process publishes: a second Create for the same
// path must fail instead of "replacing a stale file" that is in fact live.
struct LiveSegments {
  Mutex mu;
  std::set<std::string> paths GUARDED_BY(mu);
};
LiveSegments& Live() {
  static auto* live = new LiveSegments;  // never destroyed: used at exit
  return *live;
}

// Removes kvtier.<pid> files in `dir` whose process no longer exists. Best
// effort: the tools do the thorough job (pid reuse, layout checks).
void RemoveDeadSegments(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return;
  const size_t prefix_len = strlen(KVTIER_STATS_PREFIX);
  while (dirent* e = readdir(d)) {
    if (strncmp(e->d_name, KVTIER_STATS_PREFIX, prefix_len) != 0) continue;
    const char* digits = e->d_name + prefix_len;
    char* end = nullptr;
    errno = 0;
    long pid = strtol(digits, &end, 10);
    if (*digits == '\0' || *end != '\0' || errno != 0 || pid <= 0 || pid > INT32_MAX) continue;
    if (kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    unlinkat(dirfd(d), e->d_name, 0);  // may fail for another user's file: fine
  }
  closedir(d);
}

}  // namespace

uint8_t StatsSegment::HeatByte(uint32_t heat) {
  if (heat == 0) return 0;
  if (heat >= 128) return 255;
  const int width = std::bit_width(heat);  // 1..7
  const uint32_t floor_pow = 1u << (width - 1);
  // 32 per doubling, linear inside one: 1 -> 32, 2 -> 64, 3 -> 80, 4 -> 96.
  return static_cast<uint8_t>(32 * width + 32 * (heat - floor_pow) / floor_pow);
}

void StatsSegment::FillRegionRow(const Region& region, kvtier_stats_region* row) {
  memset(row, 0, sizeof *row);
  row->base = region.base;
  row->size = region.size;
  row->id = region.id;
  row->page_size = static_cast<uint32_t>(region.page_size);
  CopyString(row->tag, sizeof row->tag, region.tag);

  constexpr size_t kBuckets = KVTIER_STATS_HEAT_BUCKETS;
  const size_t n = region.pages.size();
  if (n == 0) return;
  uint32_t count[4] = {0, 0, 0, 0};
  uint32_t heat_sum[kBuckets] = {};
  uint32_t bucket_pages[kBuckets] = {};
  uint32_t bucket_tier[kBuckets][4] = {};
  for (size_t p = 0; p < n; ++p) {
    const PageRecord& rec = region.pages[p];
    const auto tier = static_cast<uint8_t>(rec.tier.load(std::memory_order_relaxed)) & 3;
    ++count[tier];
    if (n >= kBuckets) {  // every bucket gets at least one page
      const size_t b = p * kBuckets / n;
      heat_sum[b] += HeatByte(rec.heat);
      ++bucket_pages[b];
      ++bucket_tier[b][tier];
    }
  }
  row->pages_device = count[0];
  row->pages_host = count[1];
  row->pages_disk = count[2];
  row->pages_untouched = count[3];
  for (size_t b = 0; b < kBuckets; ++b) {
    if (n < kBuckets) {  // fewer pages than buckets: stretch each page
      const PageRecord& rec = region.pages[b * n / kBuckets];
      row->heat[b] = HeatByte(rec.heat);
      row->tier[b] = static_cast<uint8_t>(rec.tier.load(std::memory_order_relaxed)) & 3;
      continue;
    }
    row->heat[b] = static_cast<uint8_t>((heat_sum[b] + bucket_pages[b] / 2) / bucket_pages[b]);
    // The majority tier; a tie goes to the upper tier (device first).
    uint8_t best = 0;
    for (uint8_t t = 1; t < 4; ++t) {
      if (bucket_tier[b][t] > bucket_tier[b][best]) best = t;
    }
    row->tier[b] = best;
  }
}

Result<std::unique_ptr<StatsSegment>> StatsSegment::Create(const std::string& dir,
                                                           const StatsIdentity& identity) {
  const pid_t pid = getpid();
  std::string path = dir + "/" + KVTIER_STATS_PREFIX + std::to_string(pid);
  {
    LiveSegments& live = Live();
    MutexLock lock(&live.mu);
    if (live.paths.count(path) != 0) {
      return Status::Errorf(
          "stats segment %s: this process already publishes it (one runtime per process)",
          path.c_str());
    }
  }
  RemoveDeadSegments(dir);

  const int flags = O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC | O_NOFOLLOW;
  int fd = open(path.c_str(), flags, 0600);
  if (fd < 0 && errno == EEXIST) {
    // The name carries our pid, and no StatsSegment of ours has it: a process
    // that died with our pid left it. Replace it.
    if (unlink(path.c_str()) != 0) {
      return Status::Errorf(
          "stats segment %s: a stale file with our pid exists and cannot be removed: %s "
          "(remove it, or set KVTIER_STATS=0)",
          path.c_str(), strerror(errno));
    }
    fd = open(path.c_str(), flags, 0600);
  }
  if (fd < 0) {
    return Status::Errorf(
        "stats segment %s: cannot create: %s (check that %s exists and is writable, "
        "or set KVTIER_STATS=0)",
        path.c_str(), strerror(errno), dir.c_str());
  }
  struct stat st;
  void* map = MAP_FAILED;
  const char* step = "fchmod";
  // fchmod: the mode must be 0600 whatever the umask. posix_fallocate, not
  // ftruncate: the pages must exist before they are mapped, or the first
  // write to a full /dev/shm would kill the engine with SIGBUS.
  int err = 0;
  if (fchmod(fd, 0600) == 0 && (step = "fstat", fstat(fd, &st) == 0)) {
    step = "posix_fallocate";
    err = posix_fallocate(fd, 0, sizeof(kvtier_stats_segment));
    if (err == 0) {
      step = "mmap";
      map = mmap(nullptr, sizeof(kvtier_stats_segment), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    }
  }
  if (map == MAP_FAILED && err == 0) err = errno;  // fchmod, fstat or mmap
  close(fd);
  if (map == MAP_FAILED) {
    unlink(path.c_str());
    return Status::Errorf(
        "stats segment %s: %s failed: %s (is %s a tmpfs with space left? "
        "or set KVTIER_STATS=0)",
        path.c_str(), step, strerror(err), dir.c_str());
  }

  std::unique_ptr<StatsSegment> seg(new StatsSegment());
  seg->path_ = path;
  seg->owner_pid_ = pid;
  seg->dev_ = st.st_dev;
  seg->ino_ = st.st_ino;
  seg->shm_ = static_cast<uint64_t*>(map);
  seg->staging_ = std::make_unique<kvtier_stats_segment>();
  kvtier_stats_segment& s = *seg->staging_;
  memset(&s, 0, sizeof s);
  s.magic = KVTIER_STATS_MAGIC;
  s.version = KVTIER_STATS_VERSION;
  s.size = sizeof(kvtier_stats_segment);
  s.pid = pid;
  s.page_size = identity.page_size;
  s.start_time_ns = RealtimeNs();
  s.update_time_ns = s.start_time_ns;
  s.start_ticks = SelfStartTicks();
  CopyString(s.command, sizeof s.command, identity.command);
  CopyString(s.backend, sizeof s.backend, identity.backend);
  CopyString(s.policy, sizeof s.policy, identity.policy);
  CopyString(s.disk_io, sizeof s.disk_io, identity.disk_io);
  {
    MutexLock lock(&seg->events_mu_);  // not shared yet: taken for the analysis' sake
    seg->disk_io_ = identity.disk_io;
  }
  // Until this first write the file is all zeros: readers see magic 0 and
  // treat it as "being created".
  seg->WriteShared();
  {
    LiveSegments& live = Live();
    MutexLock lock(&live.mu);
    live.paths.insert(path);
  }
  return seg;
}

StatsSegment::~StatsSegment() { Close(); }

void StatsSegment::Close() {
  if (shm_ == nullptr) return;
  munmap(shm_, sizeof(kvtier_stats_segment));
  shm_ = nullptr;
  if (getpid() != owner_pid_) return;  // a forked child: the file is the parent's
  struct stat st;
  if (stat(path_.c_str(), &st) == 0 && st.st_dev == dev_ && st.st_ino == ino_) {
    unlink(path_.c_str());
  }
  LiveSegments& live = Live();
  MutexLock lock(&live.mu);
  live.paths.erase(path_);
}

void StatsSegment::SetDiskIo(const std::string& disk_io) {
  MutexLock lock(&events_mu_);
  disk_io_ = disk_io;
}

void StatsSegment::AddEvent(const std::string& text) {
  const uint64_t now = RealtimeNs();
  MutexLock lock(&events_mu_);
  // Only the newest KVTIER_STATS_MAX_EVENTS can be shown; keep the queue bounded
  // even when nobody publishes.
  if (pending_events_.size() >= KVTIER_STATS_MAX_EVENTS) {
    pending_events_.erase(pending_events_.begin());
  }
  pending_events_.push_back({now, text});
}

void StatsSegment::Publish(const Counters& counters, const std::vector<RegionPtr>& regions,
                           const std::vector<Device::GpuUsage>& gpus) {
  if (shm_ == nullptr) return;  // closed
  kvtier_stats_segment& s = *staging_;
#define KVTIER_STAT(name, kind, doc) s.name = Counters::Get(counters.name);
#include "kvtier/stats_fields.def"
#undef KVTIER_STAT

  uint32_t rows = 0;
  for (const RegionPtr& region : regions) {
    if (region == nullptr || rows == KVTIER_STATS_MAX_REGIONS) continue;
    FillRegionRow(*region, &s.region_rows[rows++]);
  }
  memset(&s.region_rows[rows], 0, (KVTIER_STATS_MAX_REGIONS - rows) * sizeof s.region_rows[0]);
  s.region_row_count = rows;
  uint32_t alive = 0;
  for (const RegionPtr& region : regions) alive += region != nullptr;
  s.regions_omitted = alive - rows;
  const size_t gpu_rows = std::min<size_t>(gpus.size(), KVTIER_STATS_MAX_GPUS);
  memset(s.gpus, 0, sizeof s.gpus);
  for (size_t i = 0; i < gpu_rows; ++i) {
    s.gpus[i].ordinal = gpus[i].ordinal;
    s.gpus[i].used_bytes = gpus[i].used;
    s.gpus[i].budget_bytes = gpus[i].budget;
  }
  s.gpu_count = static_cast<uint32_t>(gpu_rows);
  s.gpus_omitted = static_cast<uint32_t>(gpus.size() - gpu_rows);

  std::vector<PendingEvent> events;
  {
    MutexLock lock(&events_mu_);
    events.swap(pending_events_);
    CopyString(s.disk_io, sizeof s.disk_io, disk_io_);
  }
  for (const PendingEvent& e : events) {
    kvtier_stats_event& slot = s.events[s.event_count % KVTIER_STATS_MAX_EVENTS];
    slot.time_ns = e.time_ns;
    CopyString(slot.text, sizeof slot.text, e.text);
    ++s.event_count;
  }
  s.update_time_ns = RealtimeNs();
  WriteShared();
}

void StatsSegment::WriteShared() {
  const auto* src = reinterpret_cast<const unsigned char*>(staging_.get());
  std::atomic_ref<uint64_t> seq(shm_[kSeqWord]);
  const uint64_t s = seq.load(std::memory_order_relaxed);  // we are the only writer
  seq.store(s + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  for (size_t i = 0; i < kWords; ++i) {
    if (i == kSeqWord) continue;
    uint64_t word;
    memcpy(&word, src + i * sizeof word, sizeof word);
    std::atomic_ref<uint64_t>(shm_[i]).store(word, std::memory_order_relaxed);
  }
  seq.store(s + 2, std::memory_order_release);
}

}  // namespace kvtier
