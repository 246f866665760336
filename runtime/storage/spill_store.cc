// SpillStore: opening the spill file with its fallbacks, the slot allocator,
// degraded mode, and the synchronous Write/Read over pooled one-request
// batches. Thread-safety: see spill_store.h.
#include "runtime/storage/spill_store.h"

#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <thread>

#include "runtime/log.h"
#include "runtime/storage/checksum.h"
#include "runtime/storage/spill_batch.h"
#include "runtime/units.h"

namespace kvtier {

Result<std::unique_ptr<SpillStore>> SpillStore::Create(const SpillStoreConfig& config, Env* env,
                                                       Counters* counters) {
  if (config.dir.empty())
    return Status::Error("KVTIER_DISK_DIR is empty (set it to a directory on a local SSD)");
  size_t page = config.page_size;
  if (page < kDirectAlign || (page & (page - 1)) != 0 || page > (size_t{1} << 30)) {
    return Status::Errorf("disk tier page size %zu: not a power of two from 4 KiB to 1 GiB", page);
  }
  if (config.budget_bytes < page) {
    return Status::Errorf(
        "KVTIER_DISK_BUDGET=%llu: smaller than one %s page (set it to at least the page "
        "size, or 0 to turn the disk tier off)",
        static_cast<unsigned long long>(config.budget_bytes), FormatBytes(page).c_str());
  }
  std::unique_ptr<SpillStore> store(new SpillStore(config, env ? env : Env::Default(), counters));
  Status st = store->env_->CreateDir(config.dir);
  if (!st.ok()) {
    return Status::Error("disk tier: KVTIER_DISK_DIR=" + config.dir + ": " + st.message() +
                         " (set it to a writable directory on a local SSD)");
  }
  if (config.encrypt) {
    st = store->SetUpEncryption();
    if (!st.ok()) return st;
  }
  // AES-GCM runs at 5-20 GB/s a core (OpenSSL 3.0, intel-ipsec-mb), about
  // what a fast SSD moves: up to three helpers open (and with OpenSSL seal)
  // beside the thread that does the I/O.
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  store->workers_ = std::make_unique<WorkerPool>(config.encrypt ? std::min(cores - 1, 3u) : 0);
  st = store->Open();
  if (!st.ok()) return st;
  Counters::Set(store->counters_->disk_budget_bytes, uint64_t{store->max_slots_} * page);
  Counters::Set(store->counters_->disk_used_bytes, 0);
  Counters::Set(store->counters_->disk_copy_bytes, 0);
  Counters::Set(store->counters_->disk_degraded, 0);
  return store;
}

unsigned DefaultQueueDepth(size_t page_size) {
  return static_cast<unsigned>(
      std::clamp<size_t>((size_t{2} << 20) / std::max<size_t>(page_size, 1), 8, 32));
}

SpillStore::SpillStore(const SpillStoreConfig& config, Env* env, Counters* counters)
    : config_([&] {
        SpillStoreConfig c = config;
        c.queue_depth = c.queue_depth == 0 ? DefaultQueueDepth(c.page_size)
                                           : std::clamp(c.queue_depth, 1u, 256u);
        return c;
      }()),
      env_(env),
      own_counters_(counters ? nullptr : new Counters()),
      counters_(counters ? counters : own_counters_.get()),
      max_slots_(static_cast<uint32_t>(
          std::min<uint64_t>(config.budget_bytes / config.page_size, UINT32_MAX))) {}

SpillStore::~SpillStore() {
  idle_sync_.clear();
  env_->Close(fd_);
  if (seals_ != nullptr) munmap(seals_, sizeof(SlotSeal) * max_slots_);
}

Status SpillStore::SetUpEncryption() {
  Result<std::unique_ptr<PageCipher>> cipher = PageCipher::Create(config_.cipher);
  if (!cipher.ok()) {
    return cipher.status().Annotate("disk tier (set KVTIER_DISK_ENCRYPT=0 to spill in the clear)");
  }
  // Reserved for every slot of the budget, committed only as slots are first
  // used: next fit keeps them dense from slot 0.
  void* seals = mmap(nullptr, sizeof(SlotSeal) * max_slots_, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (seals == MAP_FAILED) {
    return Status::Errorf("disk tier: no address space for the tags of %u slots: %s", max_slots_,
                          strerror(errno));
  }
  seals_ = static_cast<SlotSeal*>(seals);
  cipher_ = std::move(cipher).value();
  return Status::Ok();
}

Status SpillStore::SealPage(uint32_t slot, PagePlace place, const uint8_t* src, uint8_t* dst,
                            size_t len) {
  SlotSeal& seal = seals_[slot];
  ++seal.generation;  // a fresh nonce, even for a rewrite of the same page
  return cipher_->Seal({slot, seal.generation, place}, src, dst, len, seal.tag);
}

Status SpillStore::OpenPage(uint32_t slot, PagePlace place, uint8_t* data, size_t len) const {
  const SlotSeal& seal = seals_[slot];
  return cipher_->Open({slot, seal.generation, place}, data, len, seal.tag);
}

// Tries the fast path first and falls back one step at a time: O_TMPFILE
// before a named file unlinked at once, O_DIRECT before buffered I/O,
// io_uring before pread/pwrite. Each candidate must pass a write+read probe,
// because some file systems accept O_DIRECT at open and refuse it at I/O.
Status SpillStore::Open() {
  std::vector<std::string> refused;
  std::vector<bool> directs =
      config_.direct ? std::vector<bool>{true, false} : std::vector<bool>{false};
  std::vector<bool> urings = config_.engine == IoEngine::kPread ? std::vector<bool>{false}
                                                                : std::vector<bool>{true, false};
  for (bool direct : directs) {
    bool tmpfile = true;
    Result<int> fd = env_->OpenTmpFile(config_.dir, direct);
    if (!fd.ok()) {
      refused.push_back(fd.status().message());
      tmpfile = false;
      fd = env_->OpenUnlinkedFile(config_.dir, direct);
      if (!fd.ok()) {
        refused.push_back(fd.status().message());
        continue;
      }
    }
    fd_ = fd.value();
    direct_ = direct;
    for (bool uring : urings) {
      std::unique_ptr<IoQueue> queue;
      if (uring) {
        Result<std::unique_ptr<IoQueue>> q = env_->NewUringQueue(1);
        if (!q.ok()) {
          refused.push_back(q.status().message());
          continue;
        }
        queue = std::move(q).value();
      } else {
        queue = env_->NewSyncQueue(1);
      }
      Status probe = Probe(queue.get());
      if (!probe.ok()) {
        refused.push_back(probe.message());
        continue;
      }
      uring_ = uring;
      io_mode_code_ = (uring ? 1 : 3) + (direct ? 0 : 1);
      // The probed queue becomes the first synchronous lane, so the first
      // restore does not pay for setting one up (nor, when every request
      // bounces, for its buffer).
      std::unique_ptr<SpillBatch> lane(new SpillBatch(this, std::move(queue), 1));
      if (Bounces(IoKind::kRead) && !lane->EnsureBounce().ok()) lane.reset();
      if (lane) {
        MutexLock lock(&pool_mu_);  // not shared yet: taken for the analysis' sake
        idle_sync_.push_back(std::move(lane));
      }
      file_desc_ = std::string(tmpfile ? "unlinked O_TMPFILE file" : "unlinked spill file") +
                   " in " + config_.dir + " (fd " + std::to_string(fd_) + ")";
      Log(1, "disk tier: %s, %s, budget %u slots of %s, queue depth %u, %s", io_mode(),
          file_desc_.c_str(), max_slots_, FormatBytes(config_.page_size).c_str(),
          config_.queue_depth,
          cipher_ ? ("pages sealed with AES-256-GCM by " + cipher_->lib_name()).c_str()
                  : "pages in the clear (KVTIER_DISK_ENCRYPT=0)");
      for (const std::string& why : refused) Log(1, "disk tier: fell back because %s", why.c_str());
      return Status::Ok();
    }
    env_->Close(fd_);
    fd_ = -1;
  }
  std::string all;
  for (const std::string& why : refused) all += (all.empty() ? "" : "; ") + why;
  return Status::Error("disk tier: no usable spill file in KVTIER_DISK_DIR=" + config_.dir + " (" +
                       all + "); point it at a writable local file system");
}

Status SpillStore::Probe(IoQueue* queue) {
  Result<AlignedBuffer> buf = AlignedBuffer::Allocate(2 * kDirectAlign);
  if (!buf.ok()) return buf.status();
  uint8_t* out = buf.value().data();
  uint8_t* in = out + kDirectAlign;
  for (size_t i = 0; i < kDirectAlign; ++i) out[i] = static_cast<uint8_t>(i * 7 + 1);
  const char* how = direct_ ? "O_DIRECT" : "buffered";
  for (IoKind kind : {IoKind::kWrite, IoKind::kRead}) {
    IoRequest r;
    r.kind = kind;
    r.fd = fd_;
    r.buf = kind == IoKind::kWrite ? out : in;
    r.len = kDirectAlign;
    std::vector<IoCompletion> done;
    Status st = queue->Submit(&r, 1);
    if (st.ok()) st = queue->Wait(1, &done);
    if (!st.ok()) return st.Annotate(std::string(queue->name()) + " " + how + " probe");
    if (done.empty() || done[0].result != static_cast<int64_t>(kDirectAlign)) {
      int64_t res = done.empty() ? 0 : done[0].result;
      return Status::Errorf("%s %s probe %s in %s: %s", queue->name(), how,
                            kind == IoKind::kWrite ? "write" : "read", config_.dir.c_str(),
                            res < 0 ? strerror(static_cast<int>(-res)) : "short transfer");
    }
  }
  if (memcmp(out, in, kDirectAlign) != 0) {
    return Status::Errorf("%s %s probe in %s read back different bytes", queue->name(), how,
                          config_.dir.c_str());
  }
  return Status::Ok();
}

Result<std::unique_ptr<IoQueue>> SpillStore::NewQueue(unsigned depth) {
  if (uring_) {
    Result<std::unique_ptr<IoQueue>> q = env_->NewUringQueue(depth);
    if (q.ok()) return q;
    static std::atomic<bool> warned{false};
    WarnOnce(&warned, "disk tier: %s; this queue uses pread/pwrite", q.status().message().c_str());
  }
  return env_->NewSyncQueue(depth);
}

Result<std::unique_ptr<SpillBatch>> SpillStore::NewBatch() { return NewBatch(config_.queue_depth); }

Result<std::unique_ptr<SpillBatch>> SpillStore::NewBatch(unsigned depth) {
  depth = std::clamp(depth, 1u, 256u);
  Result<std::unique_ptr<IoQueue>> q = NewQueue(depth);
  if (!q.ok()) return q.status();
  std::unique_ptr<SpillBatch> batch(new SpillBatch(this, std::move(q).value(), depth));
  // Set the bounce buffers up now, not in the first request's time.
  if (Bounces(IoKind::kWrite) || Bounces(IoKind::kRead)) {
    if (Status st = batch->EnsureBounce(); !st.ok()) return st;
  }
  return batch;
}

Result<SpillSlot> SpillStore::Write(const void* src, size_t len, PagePlace place) {
  Status error;
  std::unique_ptr<SpillBatch> b = AcquireSyncBatch(&error);
  if (!b) return error;
  b->AddWrite(src, len, 0, place);
  std::vector<SpillCompletion> done;
  Status st = b->WaitAll(&done);
  if (!st.ok()) return st;  // the broken batch is dropped, not pooled
  ReleaseSyncBatch(std::move(b));
  if (!done[0].status.ok()) return done[0].status;
  return done[0].slot;
}

Status SpillStore::Read(uint32_t slot, void* dst, size_t len, uint64_t expected_checksum,
                        ReadFailure* failure, PagePlace place) {
  if (failure) *failure = ReadFailure::kIoError;
  Status error;
  std::unique_ptr<SpillBatch> b = AcquireSyncBatch(&error);
  if (!b) return error;
  b->AddRead(slot, dst, len, expected_checksum, 0, place);
  std::vector<SpillCompletion> done;
  Status st = b->WaitAll(&done);
  if (!st.ok()) return st;
  ReleaseSyncBatch(std::move(b));
  if (failure) *failure = done[0].failure;
  return done[0].status;
}

Status SpillStore::ReadInForkChild(uint32_t slot, void* dst, uint64_t expected_checksum,
                                   PagePlace place) const {
  const size_t len = config_.page_size;
  // Through the Env's synchronous queue (it allocates, and takes no lock);
  // tried twice, as Read is: a bad read is not the page's loss.
  std::unique_ptr<IoQueue> queue = env_->NewSyncQueue(1);
  IoRequest req;
  req.kind = IoKind::kRead;
  req.fd = fd_;
  req.buf = dst;
  req.len = static_cast<uint32_t>(len);
  req.offset = SlotOffset(slot);
  const std::string where = "slot " + std::to_string(slot) + " of the spill file";
  Status last;
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::vector<IoCompletion> done;
    last = queue->Submit(&req, 1);
    if (last.ok()) last = queue->Wait(1, &done);
    if (!last.ok()) continue;
    if (done.empty() || done[0].result != static_cast<int64_t>(len)) {
      const int64_t result = done.empty() ? 0 : done[0].result;
      last = Status::Errorf("reading %s: %s", where.c_str(),
                            result < 0 ? strerror(static_cast<int>(-result)) : "short read");
      continue;
    }
    if (cipher_) {
      last = OpenPage(slot, place, static_cast<uint8_t*>(dst), len).Annotate(where);
    } else if (PageChecksum(dst, len) != expected_checksum) {
      last = Status::Error(where + " does not match its checksum");
    }
    if (last.ok()) return last;
  }
  return last.Annotate("on the read and on its retry");
}

void SpillStore::CloseInForkChild() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  if (workers_) workers_->AbandonInForkChild();
}

std::unique_ptr<SpillBatch> SpillStore::AcquireSyncBatch(Status* error) {
  {
    MutexLock lock(&pool_mu_);
    if (!idle_sync_.empty()) {
      std::unique_ptr<SpillBatch> b = std::move(idle_sync_.back());
      idle_sync_.pop_back();
      return b;
    }
  }
  Result<std::unique_ptr<IoQueue>> q = NewQueue(1);
  if (!q.ok()) {
    *error = q.status();
    return nullptr;
  }
  return std::unique_ptr<SpillBatch>(new SpillBatch(this, std::move(q).value(), 1));
}

void SpillStore::ReleaseSyncBatch(std::unique_ptr<SpillBatch> batch) {
  MutexLock lock(&pool_mu_);
  idle_sync_.push_back(std::move(batch));
}

Result<uint32_t> SpillStore::AcquireSlot() {
  uint64_t now = env_->NowNanos();
  MutexLock lock(&mu_);
  if (degraded_ && now < retry_at_ns_) {
    return Status::Error("disk tier backing off after a write error (" + last_error_ +
                         "); next try in " + std::to_string((retry_at_ns_ - now) / 1000000) +
                         " ms; the page stays in host memory");
  }
  // Next fit (see the header): on from the cursor; back to the start of
  // the file while more than a quarter of it is free, else the file grows.
  const uint32_t free_in_file = next_slot_ - used_slots_;
  while (cursor_ < next_slot_ && in_use_[cursor_]) ++cursor_;
  if (cursor_ == next_slot_ && free_in_file > 0 &&
      (free_in_file > next_slot_ / 4 || next_slot_ >= max_slots_)) {
    cursor_ = 0;
    while (in_use_[cursor_]) ++cursor_;  // one is free
  }
  uint32_t slot;
  if (cursor_ < next_slot_) {
    slot = cursor_++;
  } else {
    if (next_slot_ >= max_slots_) {
      return Status::Errorf(
          "disk tier full: all %u slots of %s are in use (KVTIER_DISK_BUDGET); the page "
          "stays in host memory",
          max_slots_, FormatBytes(config_.page_size).c_str());
    }
    uint64_t page = config_.page_size;
    uint64_t end = SlotOffset(next_slot_) + page;
    if (end > file_bytes_) {
      // fallocate waits for every direct I/O in flight on the file (ext4's
      // inode_dio_wait), draining the pipeline: double the file each time,
      // so that happens a handful of times, not once per step.
      const uint64_t room = uint64_t{max_slots_} * page - file_bytes_;
      const uint64_t first = AlignUp(std::max(config_.grow_bytes, page), page);
      const uint64_t doubled = std::max(first, std::min(file_bytes_, kMaxGrowStep) / page * page);
      uint64_t grow = std::min(doubled, room);
      Status st = env_->Allocate(fd_, file_bytes_, grow);
      if (!st.ok() && grow > std::min(first, room)) {
        // Less may still fit: the disk need not hold a doubled step.
        grow = std::min(first, room);
        st = env_->Allocate(fd_, file_bytes_, grow);
      }
      if (!st.ok()) {
        std::string why = st.message() + " growing the " + file_desc_;
        Counters::Add(counters_->spill_errors);
        EnterDegradedLocked(now, why);
        return Status::Error(why + "; the page stays in host memory");
      }
      file_bytes_ += grow;
    }
    slot = next_slot_++;
    cursor_ = next_slot_;
    in_use_.push_back(false);
    copy_.push_back(false);
  }
  in_use_[slot] = true;
  ++used_slots_;
  return slot;
}

void SpillStore::ReleaseSlot(uint32_t slot) {
  MutexLock lock(&mu_);
  in_use_[slot] = false;
  --used_slots_;
}

void SpillStore::Free(uint32_t slot) {
  bool copy;
  {
    MutexLock lock(&mu_);
    if (slot >= in_use_.size() || !in_use_[slot]) {
      static std::atomic<bool> warned{false};
      WarnOnce(&warned,
               "disk tier: free of spill slot %u, which is not in use (ignored; a caller bug)",
               slot);
      return;
    }
    in_use_[slot] = false;
    --used_slots_;
    copy = copy_[slot];
    if (copy) {
      copy_[slot] = false;
      --copy_slots_;
    }
  }
  Counters::Sub(copy ? counters_->disk_copy_bytes : counters_->disk_used_bytes, config_.page_size);
}

void SpillStore::KeepAsCopy(uint32_t slot) {
  {
    MutexLock lock(&mu_);
    if (slot >= in_use_.size() || !in_use_[slot] || copy_[slot]) return;
    copy_[slot] = true;
    ++copy_slots_;
  }
  Counters::Sub(counters_->disk_used_bytes, config_.page_size);
  Counters::Add(counters_->disk_copy_bytes, config_.page_size);
}

void SpillStore::Reuse(uint32_t slot) {
  {
    MutexLock lock(&mu_);
    if (slot >= in_use_.size() || !in_use_[slot] || !copy_[slot]) return;
    copy_[slot] = false;
    --copy_slots_;
  }
  Counters::Sub(counters_->disk_copy_bytes, config_.page_size);
  Counters::Add(counters_->disk_used_bytes, config_.page_size);
}

bool SpillStore::Bounces(IoKind kind) const {
  // A page is encrypted on its way into the bounce buffer, never in place.
  if (kind == IoKind::kWrite && cipher_) return true;
  if (!direct_ || config_.page_size > kMaxBouncedPage) return false;
  return !(kind == IoKind::kWrite ? config_.zero_copy_writes : config_.zero_copy_reads);
}

bool SpillStore::SlotInUse(uint32_t slot) const {
  MutexLock lock(&mu_);
  return slot < in_use_.size() && in_use_[slot];
}

uint32_t SpillStore::used_slots() const {
  MutexLock lock(&mu_);
  return used_slots_;
}

uint32_t SpillStore::copy_slots() const {
  MutexLock lock(&mu_);
  return copy_slots_;
}

void SpillStore::OnWriteDone(size_t len) {
  Counters::Add(counters_->spilled_pages);
  Counters::Add(counters_->spilled_bytes, len);
  Counters::Add(counters_->disk_used_bytes, config_.page_size);
  MutexLock lock(&mu_);
  if (degraded_) {
    degraded_ = false;
    backoff_ns_ = 0;
    Counters::Set(counters_->disk_degraded, 0);
    Log(1, "disk tier: writes succeed again; leaving degraded mode");
  }
}

void SpillStore::WipeKeyAtExit(int status) {
  if (!cipher_) return;  // no key: pages read back as ever, errors stop as ever
  exit_status_.store(status, std::memory_order_relaxed);
  exiting_.store(true, std::memory_order_release);
  cipher_->Wipe();
  Log(1, "disk tier: spill key wiped at exit (the process exits with status %d)", status);
}

bool SpillStore::exiting(int* status) const {
  if (!exiting_.load(std::memory_order_acquire)) return false;
  *status = exit_status_.load(std::memory_order_relaxed);
  return true;
}

void SpillStore::OnWriteFailed(const std::string& why) {
  Counters::Add(counters_->spill_errors);
  if (exiting_.load(std::memory_order_acquire)) return;  // no warning as the process exits
  uint64_t now = env_->NowNanos();
  MutexLock lock(&mu_);
  EnterDegradedLocked(now, why);
}

void SpillStore::EnterDegradedLocked(uint64_t now_ns, const std::string& why) {
  backoff_ns_ =
      degraded_ ? std::min(backoff_ns_ * 2, config_.backoff_max_ns) : config_.backoff_min_ns;
  degraded_ = true;
  retry_at_ns_ = now_ns + backoff_ns_;
  last_error_ = why;
  Counters::Set(counters_->disk_degraded, 1);
  static std::atomic<bool> warned{false};
  WarnOnce(&warned,
           "disk tier degraded: %s; pages stay in host memory and spilling retries with backoff "
           "(later errors are counted in spill_errors)",
           why.c_str());
  Log(1, "disk tier: degraded, next write attempt in %llu ms (%s)",
      static_cast<unsigned long long>(backoff_ns_ / 1000000), why.c_str());
}

bool SpillStore::writable(uint64_t now_ns) const {
  if (exiting_.load(std::memory_order_acquire)) return false;
  MutexLock lock(&mu_);
  return !degraded_ || now_ns >= retry_at_ns_;
}

const char* SpillStore::io_mode() const {
  static const char* const kModes[] = {"none", "io_uring+direct", "io_uring", "pread+direct",
                                       "pread"};
  return kModes[io_mode_code_];
}

}  // namespace kvtier
