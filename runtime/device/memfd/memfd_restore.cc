// MemfdDevice's restore pipeline: a returning session's spilled pages come
// back at the disk's speed, not one synchronous read per fault.
//
// A fault on a spilled page does not read it on the fault thread: it queues
// the page at the front of the pipeline, with the pages its *stream* reads
// next, and returns to the next fault. A stream is where the engine reads a
// region's pages one after another (a layer's K or V of one session in
// llama.cpp's KV buffer; with flash attention K and V are two streams read
// in step): each fault in a stream doubles how far past it the pipeline
// queues (512 KiB, then 1 MiB, up to kMaxWindowBytes, or a quarter of how far
// the stream was followed, up to kRestoreBytes), so a session's pages are read
// ahead of its kernels in the order they touch them, and a read that is not
// followed costs at most one window. The `kvtier-restore` thread keeps up to
// kInFlightBytes of reads in flight on one io_uring. Queued pages that are
// neighbours in the region and in the spill file (the store hands out slots
// next-fit and spills go in page order) are read as one run of up to
// kMaxRestoreReadBytes, into a chunk of the pipeline's read buffers (huge pages,
// kRestoreBytes in all, made once the store holds a page: an O_DIRECT read
// into the memfd's own pages would pin and populate them page by page,
// which took two thirds of this thread's time). A verified run is installed with one
// UFFDIO_COPY (after making room as a fault does), which wakes its
// waiters: an engine thread waits for its own page only, and never sees
// unverified bytes. The copy, most of a restore's CPU, runs without the
// device lock, on `kvtier-install` and (a run a pass) on this thread, while
// this thread keeps reads in flight. A page keeps its copy on SSD once back
// (kPageDiskCopy).
//
// A region being destroyed or degraded drops its queued restores; reads
// already started complete first (the region's disk_io counts them).
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <system_error>

#include "runtime/device/memfd/memfd_device.h"
#include "runtime/internal_thread.h"
#include "runtime/log.h"
#include "runtime/storage/page_io.h"

namespace kvtier {
namespace {

// The pipeline's read buffers (pages read and not yet installed) and the
// bytes of its reads in flight, each read at most kMaxRestoreReadBytes
// (page_io.h: why not more).
constexpr size_t kRestoreBytes = size_t{16} << 20;
constexpr size_t kInFlightBytes = size_t{8} << 20;
// Pages read ahead of a touch (queued or in flight) take at most this share
// of the device: 1/4.
constexpr uint64_t kAheadShare = 4;
// Bytes of reads of other layers' pages in flight at most (see
// RestoreJob::later): a fault's read waits behind no more than this. As
// much as a stream reads around its fault (kMaxWindowBytes): on a disk that
// lands what is in flight together, the faulting layer's span and the next
// stride's (llama.cpp: that layer's K, then its V) land first; with 8 MiB
// a returning llama.cpp session took longer (docs/results/2026-12-05-bench-llama-host.md).
constexpr size_t kLaterBytes = size_t{4} << 20;
// Copies ahead: the oldest resident pages within capacity / share of the
// device's eviction end are kept with a current copy on SSD, so that the
// next returning session evicts them without a write; kCopyBytes of those
// writes are in flight at most, and a pass that finds none waits this long.
constexpr uint64_t kCopyReserveShare = 2;
constexpr size_t kCopyBytes = size_t{1} << 20;
constexpr std::chrono::milliseconds kCopyIdleWait{20};
// In bytes, so that a larger KVTIER_PAGE_SIZE reads no further ahead (64
// pages of 256 KiB would be four llama.cpp sessions' span of a layer, read
// and evicted again before their turn):
constexpr size_t kFirstWindowBytes = size_t{512} << 10;  // queued past a stream's first fault
constexpr size_t kMaxWindowBytes = size_t{4} << 20;      // ... and past a later one (more if
                                                         // followed far: StreamForLocked)
// Faults closer than this to the previous one continue its run (see
// NoteFaultLocked).
constexpr size_t kNearBytes = size_t{1} << 20;

// `bytes` in pages of `page_size`, at least one.
uint32_t PagesIn(size_t bytes, size_t page_size) {
  return static_cast<uint32_t>(std::max<size_t>(bytes / page_size, 1));
}

// True when 16 words spread over the page are all zero.
bool LooksAllZero(const uint8_t* bytes, size_t len) {
  const auto* words = reinterpret_cast<const uint64_t*>(bytes);
  const size_t n = len / sizeof(uint64_t);
  uint64_t any = 0;
  for (size_t i = 0; i < 16; ++i) any |= words[i * (n - 1) / 15];
  return any == 0;
}

// pwrite(2) of all `n` bytes at `offset`.
Status WriteFully(int fd, const uint8_t* bytes, uint64_t n, off_t offset) {
  uint64_t done = 0;
  while (done < n) {
    const ssize_t w = pwrite(fd, bytes + done, n - done, offset + static_cast<off_t>(done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      return Status::Errorf("writing %llu bytes into the memfd at offset %lld failed: %s",
                            static_cast<unsigned long long>(n), static_cast<long long>(offset),
                            w < 0 ? strerror(errno) : "no progress");
    }
    done += static_cast<uint64_t>(w);
  }
  return Status::Ok();
}

}  // namespace

Status MemfdDevice::StartRestorer(const StartStepCheck& check) {
  if (store_ == nullptr) return Status::Ok();
  if (Status s = CheckStartStep(check, "restore thread"); !s.ok()) return s;
  // Without it a fault waits for the next completion to be seen.
  restore_wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  return StartQuietThread(
      "restore thread", [this] { RestoreLoop(); }, &restorer_);
}

void MemfdDevice::WakeRestorerLocked() {
  if (hold_wake_ > 0) {
    wake_held_ = true;
    return;
  }
  restore_work_.Signal();
  // And out of its wait on I/O: new work goes ahead of what is queued.
  const uint64_t one = 1;
  if (restore_wake_fd_ >= 0) (void)!write(restore_wake_fd_, &one, sizeof one);
}

MemfdDevice::ReadStream& MemfdDevice::StreamForLocked(const MemfdRegion& r, uint32_t page,
                                                      bool* fresh) {
  ReadStream* slot = &streams_[0];  // the oldest, unless a stream restarts
  *fresh = false;
  const uint32_t max_window = PagesIn(kMaxWindowBytes, r.region->page_size);
  // The page right before the fault on disk, and no read took it.
  const PageRecord* prev = page > 0 ? &r.region->pages[page - 1] : nullptr;
  const bool unread_before = prev != nullptr &&
                             prev->tier.load(std::memory_order_relaxed) == Tier::kDisk &&
                             !(prev->flags.load(std::memory_order_relaxed) & kPageInFlight);
  for (ReadStream& s : streams_) {
    // The fault is where the stream is, or just past what it queued ...
    if (s.r == &r && page >= s.start && page < s.next + max_window) {
      // ... unless an unread page lies right before it, past what the
      // stream queued: the stream never got there. In llama.cpp's buffer a
      // session's cells follow the last one's, so a returning session's
      // first fault falls within reach of the last return's stream; it
      // starts a stream of its own, in that stream's slot, which reads
      // the session's cells before the fault first.
      if (unread_before && page - 1 >= s.next) {
        slot = &s;
        break;
      }
      // A stream followed far (a whole region read in order, a long
      // session's span of a layer) reads further ahead: up to a quarter of
      // how far it was followed, at most kRestoreBytes. A window of
      // kMaxWindowBytes is fewer reads in flight than a disk needs for its
      // speed, and a read not followed costs at most a quarter more.
      const uint32_t followed_cap = std::clamp<uint32_t>(
          (page - s.start) / 4, max_window, PagesIn(kRestoreBytes, r.region->page_size));
      s.window = std::min(s.window * 2, ScaledWindowLocked(followed_cap));
      s.used = ++stream_clock_;
      return s;
    }
    if (s.used < slot->used) slot = &s;
  }
  const uint32_t first_window = ScaledWindowLocked(PagesIn(kFirstWindowBytes, r.region->page_size));
  *slot = ReadStream{&r, page, page, first_window, ++stream_clock_, page, page + 1, page, page};
  *fresh = true;
  return *slot;
}

bool MemfdDevice::RestorerIdle() const {
  MutexLock lock(&mu_);
  return restorer_idle_;
}

bool MemfdDevice::TakeBackQueuedLocked(MemfdRegion& r, uint32_t page) {
  size_t queued_reads = 0;
  auto job = restore_queue_.end();
  for (auto it = restore_queue_.begin(); it != restore_queue_.end(); ++it) {
    if (!it->read) continue;
    ++queued_reads;
    if (it->r == &r && it->page == page) job = it;
  }
  if (job == restore_queue_.end()) return false;
  // Only where the pipeline cannot start it soon: it has as much started
  // as it may (kRestoreBytes), or the device is too small for that much
  // (its ahead share is less), so that the pipeline's reads are few and
  // short and the fault threads' own reads add to them. Otherwise the
  // pipeline starts it in its next pass, in one read with its neighbours:
  // taken back whenever it was queued, pages came back one read, one open
  // and one install each, and the simulated GPU's restore ran at two thirds
  // of the speed (kvtier-bench spill).
  const size_t most = PagesIn(kRestoreBytes, store_->page_size());
  const size_t started = restoring_pages_ - std::min(restoring_pages_, queued_reads);
  if (AheadLimit() >= most && started < most) return false;
  restore_queue_.erase(job);
  r.region->pages[page].flags.fetch_and(static_cast<uint8_t>(~kPageInFlight),
                                        std::memory_order_relaxed);
  EndRestoreLocked(r);
  return true;
}

void MemfdDevice::NoteFaultLocked(uintptr_t addr, size_t page_size) {
  StrideGuess& g = stride_;
  const uintptr_t last = g.last;
  g.last = addr;
  // A fault near the latest one continues its run; one elsewhere starts a
  // new run. Three runs that start at equal distances vote for that
  // distance as the stride: an engine writes a step's new KV to the same
  // cells of every layer's K and V one after another, and reads a
  // session's cells layer after layer.
  const uintptr_t near = std::max<uintptr_t>(kNearBytes, page_size);
  if (last != 0 && (addr > last ? addr - last : last - addr) <= near) return;
  g.starts[0] = g.starts[1];
  g.starts[1] = g.starts[2];
  g.starts[2] = addr;
  if (g.starts[0] == 0 || g.starts[1] <= g.starts[0] || g.starts[2] <= g.starts[1]) return;
  const uintptr_t d = g.starts[1] - g.starts[0];
  if (g.starts[2] - g.starts[1] != d || d <= near) return;
  // Each such triple votes for its distance; the distance with the most
  // votes (two at least) is the stride. Noise (a run cut short by a full
  // device, say) votes too, but rarely twice for one distance.
  StrideGuess::Vote* slot = nullptr;
  for (StrideGuess::Vote& v : g.votes) {
    if (v.distance == d) {
      slot = &v;
      break;
    }
    if (slot == nullptr || v.count < slot->count) slot = &v;
  }
  if (slot->distance != d) *slot = {d, 0};
  ++slot->count;
  const StrideGuess::Vote* best = &g.votes[0];
  for (const StrideGuess::Vote& v : g.votes) {
    if (v.count > best->count) best = &v;
  }
  if (best->count >= 2) g.stride = best->distance;
}

bool MemfdDevice::TakeForRestoreLocked(MemfdRegion& r, uint32_t page,
                                       std::vector<RestoreJob>* out) {
  PageRecord& rec = r.region->pages[page];
  if (rec.flags.load(std::memory_order_relaxed) & kPageInFlight) return false;
  switch (rec.tier.load(std::memory_order_relaxed)) {
    case Tier::kDisk:
      rec.flags.fetch_or(kPageInFlight, std::memory_order_relaxed);
      ++r.disk_io;
      ++restoring_pages_;
      out->push_back({&r, page, true});
      return true;
    case Tier::kHost:
      out->push_back({&r, page, false});
      return true;
    default:
      return false;
  }
}

void MemfdDevice::ReplicateLocked(ReadStream& s) {
  if (stride_.stride == 0 || s.r == nullptr) return;
  if (!ReadAheadPaysLocked()) return;
  const Region& from = *s.r->region;
  const uint32_t lo = std::min(s.lo, s.rep_lo), hi = std::max(s.hi, s.rep_hi);
  if (lo == s.rep_lo && hi == s.rep_hi && !s.replicating) return;
  std::vector<RestoreJob> jobs;
  bool cut = false;  // by the ahead limit: the rest is queued as reads end
  // The layers after the stream's first (the engine goes on to them), then
  // those before it.
  for (int direction : {1, -1}) {
    for (uintptr_t k = 1;; ++k) {
      const uintptr_t shift = k * stride_.stride;
      bool any = false;
      for (uint32_t p = lo; p < hi; ++p) {
        if (p >= s.rep_lo && p < s.rep_hi) continue;  // queued at every stride already
        const uintptr_t at = from.PageAddr(p);
        if (direction < 0 && at < shift) break;
        const uintptr_t addr = direction > 0 ? at + shift : at - shift;
        // In the same region (llama.cpp's one KV buffer), or in a sibling
        // of its size (an engine's per-layer KV tensors).
        MemfdRegion* r = FindByAddressLocked(addr);
        if (r == nullptr || (r != s.r && r->region->size != from.size)) continue;
        any = true;
        if (restoring_pages_ >= AheadLimit()) {
          cut = true;
          break;
        }
        if (!r->degraded && !r->releasing &&
            TakeForRestoreLocked(*r, r->region->PageOf(addr), &jobs)) {
          jobs.back().later = true;
          // The cells the engine appends to, in another layer.
          if (p == s.write_page && jobs.back().read) MarkWriteNextLocked(addr);
        }
      }
      if (!any || cut) break;  // past the last layer that way
    }
    if (cut) break;
  }
  s.replicating = cut;
  if (!cut) {
    s.rep_lo = lo;
    s.rep_hi = hi;
  }
  if (jobs.empty()) return;
  restore_queue_.insert(restore_queue_.end(), jobs.begin(), jobs.end());
  WakeRestorerLocked();
}

void MemfdDevice::MarkWriteNextLocked(uintptr_t addr) {
  // Bounded: an entry whose page never came back (its region went, say)
  // would only map a later install there writable, which hashing covers.
  if (write_next_.size() >= kMaxWriteNext) write_next_.clear();
  write_next_.insert(addr);
}

void MemfdDevice::QueueRestoreLocked(MemfdRegion& r, uint32_t page, Clock::time_point since,
                                     bool read_here, bool write) {
  Region& region = *r.region;
  PageRecord& rec = region.pages[page];
  // A page the caller reads itself is marked in flight while its
  // neighbours are queued, so that no window or replica queues it too (two
  // installs of one page: the later one would bring back stale bytes).
  const bool mark = read_here && !(rec.flags.load(std::memory_order_relaxed) & kPageInFlight);
  if (mark) rec.flags.fetch_or(kPageInFlight, std::memory_order_relaxed);
  if (!read_here) waiting_.emplace(region.PageAddr(page), since);
  bool fresh = false;
  ReadStream& stream = StreamForLocked(r, page, &fresh);
  if (write) {
    // It comes back writable (whoever reads it), and so do its replicas.
    MarkWriteNextLocked(region.PageAddr(page));
    stream.write_page = page;
  }
  // A new stream takes in the pages on disk before the fault (at most
  // kMaxWindowBytes): an engine's first touch of a returning session is where
  // it writes the new tokens, after the session's cells, which it then
  // reads from the first. Those come first. (Pages in host memory before
  // it were most likely read and let go just now.)
  uint32_t before = page;
  if (fresh) {
    const uint32_t most = ScaledWindowLocked(PagesIn(kMaxWindowBytes, region.page_size));
    while (before > 0 && page - before < most &&
           region.pages[before - 1].tier.load(std::memory_order_relaxed) == Tier::kDisk) {
      --before;
    }
    stream.start = before;
  }
  stream.lo = std::min(stream.lo, before);
  stream.hi = std::max(stream.hi, page + 1);
  // ... and what follows it, up to a page never touched (the end of what
  // the engine wrote there).
  uint32_t end = page + 1;
  while (end < region.pages.size() && end - page <= stream.window &&
         region.pages[end].tier.load(std::memory_order_relaxed) != Tier::kUntouched) {
    ++end;
  }
  // The faulting page and what the stream reads next go to the front, in
  // that order: the queued ones among them move (those of this region from
  // `page` on that sit together, as the stream queued them), the others are
  // marked in flight and join.
  std::vector<RestoreJob> front;
  auto it = std::find_if(restore_queue_.begin(), restore_queue_.end(), [&](const RestoreJob& j) {
    return j.r == &r && j.page == page && j.read;
  });
  if (it != restore_queue_.end()) {
    auto last = it;
    while (last != restore_queue_.end() && last->r == &r && last->page < end &&
           last->page == page + static_cast<uint32_t>(last - it)) {
      front.push_back(*last++);
      front.back().later = false;  // where the engine is now
    }
    restore_queue_.erase(it, last);
  }
  for (uint32_t p = front.empty() ? page + (read_here ? 1 : 0) : front.back().page + 1; p < end;
       ++p) {
    // The faulting page always; those after it while the pipeline holds
    // less than its share of the device (pages that arrive ahead must not
    // push out the ones the engine uses, nor each other, before their use).
    if (p != page && restoring_pages_ >= AheadLimit()) break;
    TakeForRestoreLocked(r, p, &front);  // unless queued or read already
  }
  if (before < page) {
    // Right after the faulting page.
    std::vector<RestoreJob> earlier;
    for (uint32_t p = before; p < page && restoring_pages_ < AheadLimit(); ++p) {
      TakeForRestoreLocked(r, p, &earlier);
    }
    const size_t at = !front.empty() && front[0].page == page ? 1 : 0;
    front.insert(front.begin() + static_cast<ptrdiff_t>(at), earlier.begin(), earlier.end());
  }
  stream.next = std::max(stream.next, end);
  if (!front.empty()) {
    restore_queue_.insert(restore_queue_.begin(), front.begin(), front.end());
    WakeRestorerLocked();
  }
  ReplicateLocked(stream);
  if (mark) rec.flags.fetch_and(static_cast<uint8_t>(~kPageInFlight), std::memory_order_relaxed);
}

void MemfdDevice::CancelRestoresLocked(const MemfdRegion* r) {
  std::deque<RestoreJob> kept;
  for (const RestoreJob& j : restore_queue_) {
    if (r != nullptr && j.r != r) {
      kept.push_back(j);
      continue;
    }
    if (!j.read) continue;
    Region& region = *j.r->region;
    region.pages[j.page].flags.fetch_and(static_cast<uint8_t>(~kPageInFlight),
                                         std::memory_order_relaxed);
    waiting_.erase(region.PageAddr(j.page));
    // A waiter faults again (and then finds the region gone or untiered).
    uffd_.Wake(region.PageAddr(j.page), region.page_size);
    EndRestoreLocked(*j.r);
  }
  restore_queue_.swap(kept);
  for (ReadStream& s : streams_) {
    if (r == nullptr || s.r == r) s = ReadStream{};
  }
}

size_t MemfdDevice::AheadLimit() const {
  // A device of a few pages still reads a faulting page and two past it.
  return std::max<uint64_t>(capacity() / kAheadShare / store_->page_size(), 3);
}

// A page read ahead and wanted back from disk within this many device
// capacities of installs was read in vain: left untouched, it was pushed out
// by about a capacity of installs and read again when the engine got there;
// or the engine cycles through more than the device holds, where reading
// other layers ahead only pushes out what it touches next.
constexpr uint32_t kVainDistance = 2;
// Other layers are read ahead again once no read ahead was in vain for this
// long (a returning session after the engine's thrashing stopped).
constexpr std::chrono::milliseconds kVainQuiet{1000};
// The windows shrink to 1/32 at most; one page parked ahead left untouched
// halves them, this many touched double them: they settle where about one
// read ahead in kAheadRegrow + 1 is in vain (the kernel shrinks its swap
// read-ahead the same way when what it read is not used).
constexpr uint32_t kMostAheadShift = 5;
constexpr uint32_t kAheadRegrow = 16;

uint32_t MemfdDevice::ScaledWindowLocked(uint32_t pages) const {
  return std::max<uint32_t>(pages >> ahead_shift_, 1);
}

void MemfdDevice::LearnAheadLocked(bool paid) {
  if (!paid) {
    ahead_shift_ = std::min(ahead_shift_ + 1, kMostAheadShift);
    ahead_paid_ = 0;
    return;
  }
  if (ahead_shift_ > 0 && ++ahead_paid_ >= kAheadRegrow) {
    --ahead_shift_;
    ahead_paid_ = 0;
  }
}

void MemfdDevice::JudgeInstallLocked(PageRecord& rec, bool ahead, bool parked) {
  const uint32_t mark = rec.backend;
  rec.backend = ahead ? (installs_ << kClockShift | kReadAhead | (parked ? kParkedAhead : 0)) : 0;
  ++installs_;
  if (!(mark & kReadAhead)) return;
  const uint32_t since = (installs_ - (mark >> kClockShift)) & (~0u >> kClockShift);
  if (since > kVainDistance * (capacity() / store_->page_size())) return;  // it paid, or aged out
  last_vain_ = Clock::now();
}

void MemfdDevice::LeftParkedLocked(PageRecord& rec, bool learn) {
  rec.backend &= ~kParkedAhead;
  Counters::Add(counters_.readahead_vain_pages, park_every_);
  if (!learn) return;
  LearnAheadLocked(/*paid=*/false);
  last_vain_ = Clock::now();
}

Status MemfdDevice::InstallRun(MemfdRegion& r, uint32_t first, uint32_t count, const uint8_t* bytes,
                               const std::vector<bool>& parked, bool protect,
                               bool* unwritten) const {
  const size_t len = r.region->page_size;
  *unwritten = true;
  for (uint32_t i = 0; i < count;) {
    uint32_t end = i + 1;
    while (end < count && parked[end] == parked[i]) ++end;
    const uint64_t off = uint64_t{i} * len, n = uint64_t{end - i} * len;
    if (parked[i]) {
      // Into the memfd only: the engine's first touch raises a MINOR fault.
      if (Status s = WriteFully(r.views.memfd, bytes + off, n,
                                static_cast<off_t>(uint64_t{first} * len + off));
          !s.ok()) {
        return s;
      }
    } else {
      bool all = false;
      if (Status s = CopyIn(r.region->PageAddr(first + i), n, bytes + off, protect, &all);
          !s.ok()) {
        return s;
      }
      *unwritten = *unwritten && all;
    }
    i = end;
  }
  return Status::Ok();
}

bool MemfdDevice::ReadAheadPaysLocked() const { return Clock::now() - last_vain_ >= kVainQuiet; }

void MemfdDevice::EndRestoreLocked(MemfdRegion& r) {
  --restoring_pages_;
  EndDiskIoLocked(r);
}

void MemfdDevice::AbandonRunLocked(MemfdRegion& r, uint32_t first, uint32_t count) {
  Region& region = *r.region;
  for (uint32_t p = first; p < first + count; ++p) {
    region.pages[p].flags.fetch_and(static_cast<uint8_t>(~kPageInFlight),
                                    std::memory_order_relaxed);
    waiting_.erase(region.PageAddr(p));
    EndRestoreLocked(r);
  }
  uffd_.Wake(region.PageAddr(first), uint64_t{count} * region.page_size);
}

bool MemfdDevice::InstallRunFromPipeline(MemfdRegion& r, uint32_t first, uint32_t count,
                                         const uint8_t* bytes) {
  // With the host backend's staging, in parts of at most half of it, each
  // once the staging is not full: the written pages a part evicts are
  // staged, and the drain writes them out while the next part goes in (a
  // part never waits for its room to be made in full: clean pages, most of
  // those evicted, leave without staging). Resident memory passes the
  // budget by at most the evictions of a part whose writes are on their
  // way.
  const uint64_t len = r.region->page_size;
  const uint32_t part = host_limit() == 0
                            ? count
                            : static_cast<uint32_t>(std::max<uint64_t>(host_limit() / len / 2, 1));
  for (uint32_t done = 0; done < count; done += part) {
    const uint32_t n = std::min(part, count - done);
    if (host_limit() != 0) WaitForStagingRoom(len, /*engine_waits=*/true);
    if (!InstallPartFromPipeline(r, first + done, n, bytes + uint64_t{done} * len)) {
      MutexLock lock(&mu_);
      if (done + n < count) AbandonRunLocked(r, first + done + n, count - done - n);
      return false;
    }
  }
  return true;
}

bool MemfdDevice::InstallPartFromPipeline(MemfdRegion& r, uint32_t first, uint32_t count,
                                          const uint8_t* bytes) {
  std::vector<Evicted> evicted;
  std::vector<std::pair<uint32_t, uint64_t>> faulted;  // page, wait
  std::vector<std::pair<uint32_t, uint32_t>> ahead;    // runs: first, count
  RegionPtr region = r.region;
  const size_t len = region->page_size;
  const uint64_t bytes_in = uint64_t{count} * len;
  // Read under the lock: once these pages' I/O ends, a DestroyRegion
  // waiting for it may free `r`.
  bool degraded = false;
  bool protect = false;
  bool reserved = false;   // bytes_in taken in installing_bytes_
  bool unwritten = false;  // all of the mapped ones mapped write-protected
  // One in park_every_ of the pages read ahead of any touch is parked:
  // written into the memfd, left unmapped in the engine's view (see
  // JudgeInstallLocked in the header). The others, and those a thread waits
  // on or the engine writes next, are mapped.
  std::vector<bool> parked(count, false);
  Status s;
  {
    MutexLock lock(&mu_);
    // Installs under way without the lock leave room for this one and a
    // page for each fault thread (whose room MakeRoomLocked must find
    // among resident pages), or this one waits for them.
    const uint64_t keep = uint64_t{max_page_size_.load(std::memory_order_relaxed)} * fault_threads_;
    while (installing_bytes_ > 0 && installing_bytes_ + bytes_in + keep > capacity()) {
      disk_io_done_.Wait(mu_);
    }
    if (r.releasing) {
      AbandonRunLocked(r, first, count);  // its release frees the slots
      return true;
    }
    degraded = r.degraded;
    if (r.degraded) {
      // The view is about to be unregistered (DegradeLocked waits for this
      // read): the bytes go into the memfd, where the engine will find them.
      memcpy(r.views.alias + uint64_t{first} * len, bytes, bytes_in);
    } else {
      s = MakeRoomLocked(bytes_in, &evicted);
      if (s.ok()) {
        // Marked unwritten before they are mapped: a write right after the
        // copy raises a WP fault, which clears the mark; marked after, with
        // the lock let go in between, the write would be lost.
        protect = r.protectable;
        for (uint32_t i = 0; i < count; ++i) {
          const uintptr_t addr = region->PageAddr(first + i);
          parked[i] = park_every_ != 0 && !waiting_.contains(addr) && !write_next_.contains(addr) &&
                      park_clock_++ % park_every_ == 0;
        }
        if (protect) {
          for (uint32_t p = first; p < first + count; ++p) {
            region->pages[p].flags.fetch_or(kPageUnwritten, std::memory_order_relaxed);
          }
        }
        if (bytes_in + keep <= capacity()) {
          // The room stays taken while the pages are copied in without the
          // lock (the copy is most of a restore's CPU: the fault threads
          // and the other installer go on meanwhile). The pages stay on
          // disk and in flight until it ends: a fault on one waits for the
          // copy's wake, nothing else takes them.
          installing_bytes_ += bytes_in;
          reserved = true;
        } else {
          // A device too small to spare the room: copied in under the lock.
          s = InstallRun(r, first, count, bytes, parked, protect, &unwritten);
        }
      }
    }
  }
  if (reserved) {
    s = InstallRun(r, first, count, bytes, parked, protect, &unwritten);
    if (s.ok() && after_unlocked_copy_) after_unlocked_copy_(region->PageAddr(first), bytes_in);
  }
  bool installed = true;
  {
    MutexLock lock(&mu_);
    if (reserved) installing_bytes_ -= bytes_in;
    if (!s.ok()) {
      Log(0, "%s: installing restored pages %u..%u of region %u: %s", who(), first,
          first + count - 1, region->id, s.message().c_str());
      for (uint32_t p = first; p < first + count; ++p) {
        region->pages[p].flags.fetch_and(static_cast<uint8_t>(~kPageUnwritten),
                                         std::memory_order_relaxed);
      }
      AbandonRunLocked(r, first, count);
      installed = false;
    } else {
      const Clock::time_point now = Clock::now();
      for (uint32_t p = first; p < first + count; ++p) {
        PageRecord& rec = region->pages[p];
        // Marked before the copy, and no write fault since.
        const bool kept = (rec.flags.load(std::memory_order_relaxed) & kPageUnwritten) != 0;
        SetTierLocked(r, p, degraded ? Tier::kHost : Tier::kDevice);  // clears the mark
        auto waited = waiting_.find(region->PageAddr(p));
        bool park = !degraded && parked[p - first];
        if (degraded) {
          // Its bytes are in the memfd, where the engine will find them.
          store_->Free(rec.disk_slot);
        } else {
          store_->KeepAsCopy(rec.disk_slot);
          rec.flags.fetch_or(kPageDiskCopy, std::memory_order_relaxed);
          if (park && waited != waiting_.end()) {
            // Touched while it was read: mapped now (writable: its copy is
            // then judged by its hash when it leaves).
            park = false;
            if (Status m = uffd_.Continue(region->PageAddr(p), len); !m.ok()) {
              Log(1, "%s: mapping a restored page: %s (its waiter faults again)", who(),
                  m.message().c_str());
              uffd_.Wake(region->PageAddr(p), len);
            }
          } else if (park) {
            // Unmapped, nothing but kvtier can write it: its copy stays
            // current until a touch maps it.
            rec.flags.fetch_or(kPageUnwritten, std::memory_order_relaxed);
          } else if (unwritten) {
            if (kept) rec.flags.fetch_or(kPageUnwritten, std::memory_order_relaxed);
            MapWritableIfMarkedLocked(r, p);
          }
        }
        rec.flags.fetch_and(static_cast<uint8_t>(~kPageInFlight), std::memory_order_relaxed);
        if (!degraded) {
          JudgeInstallLocked(rec, /*ahead=*/waited == waiting_.end(), park);
        }
        if (waited != waiting_.end()) {
          const auto wait_ns = static_cast<uint64_t>(
              std::chrono::duration_cast<std::chrono::nanoseconds>(now - waited->second).count());
          Counters::Add(counters_.faults);
          Counters::Add(counters_.fault_bytes, len);
          Counters::Add(counters_.fault_ns, wait_ns);
          faulted.emplace_back(p, wait_ns);
          waiting_.erase(waited);
        } else {
          Counters::Add(counters_.restored_ahead_pages);
          if (!ahead.empty() && ahead.back().first + ahead.back().second == p) {
            ++ahead.back().second;
          } else {
            ahead.emplace_back(p, 1);
          }
        }
        EndRestoreLocked(r);
      }
    }
  }
  Report(evicted);
  if (events_ && !degraded) {
    for (const auto& [page, wait_ns] : faulted)
      events_->OnFault(*region, page, Tier::kDisk, wait_ns);
    for (const auto& [p, n] : ahead) events_->OnArrivedAhead(*region, p, n, Tier::kDisk);
  }
  return installed;
}

void MemfdDevice::FinishCopyLocked(MemfdRegion& r, uint32_t page,
                                   const Result<SpillSlot>& written) {
  EndDiskIoLocked(r);
  PageRecord& rec = r.region->pages[page];
  rec.flags.fetch_and(static_cast<uint8_t>(~kPageCopying), std::memory_order_relaxed);
  if (!written.ok()) return;  // the store counted it; the page stays as it was
  const Tier tier = rec.tier.load(std::memory_order_relaxed);
  // Still in memory, and not moving or spilled meanwhile: the copy is its.
  if (!r.degraded && !r.releasing && (tier == Tier::kDevice || tier == Tier::kHost) &&
      !(rec.flags.load(std::memory_order_relaxed) & (kPageDiskCopy | kPageInFlight))) {
    rec.disk_slot = written.value().index;
    rec.checksum = written.value().checksum;
    rec.flags.fetch_or(kPageDiskCopy, std::memory_order_relaxed);
    store_->KeepAsCopy(written.value().index);
    Counters::Add(counters_.copied_ahead_pages);
  } else {
    store_->Free(written.value().index);
  }
}

std::vector<PageRef> MemfdDevice::PickCopiesLocked(size_t most) {
  std::vector<PageRef> picked;
  // Only while the device is fuller than capacity - reserve: the next
  // reserve bytes to arrive evict that many of the oldest pages.
  const uint64_t reserve = capacity() / kCopyReserveShare;
  const uint64_t resident = resident_bytes_.load(std::memory_order_relaxed);
  if (!copy_ahead_ || resident + reserve <= capacity()) return picked;
  uint64_t scanned = 0;
  for (ResidentLink<MemfdRegion>* l = resident_.Oldest();
       l != nullptr && picked.size() < most && scanned < reserve; l = resident_.Newer(l)) {
    MemfdRegion& r = *l->owner;
    scanned += r.region->page_size;
    const PageRecord& rec = r.region->pages[l->page];
    if (r.degraded || r.releasing ||
        (rec.flags.load(std::memory_order_relaxed) &
         (kPageDiskCopy | kPageInFlight | kPageCopying))) {
      continue;
    }
    // A page of zeros leaves without a write anyway (engines clear their
    // KV buffers before use). A sample says so: this runs every pass over
    // pages that may stay zeros for long, and one taken for zeros wrongly
    // is only written at its eviction instead.
    if (LooksAllZero(r.views.alias + uint64_t{l->page} * r.region->page_size,
                     r.region->page_size)) {
      continue;
    }
    picked.push_back({r.region.get(), l->page});
  }
  return picked;
}

void MemfdDevice::RestoreLoop() {
  MarkKvtierThread();
  pthread_setname_np(pthread_self(), "kvtier-restore");
  const size_t page_size = store_->page_size();
  const size_t max_pages = std::max<size_t>(kRestoreBytes / page_size, 1);
  // Reads land in chunks of `run_pages` pages of one slab, max_pages in
  // all (huge pages where the kernel gives them); `depth` of them in flight.
  const auto run_pages = static_cast<uint32_t>(
      std::clamp<size_t>(kMaxRestoreReadBytes / page_size, 1, max_pages / 8 + 1));
  const size_t depth = std::max<size_t>(kInFlightBytes / (run_pages * page_size), 1);
  const size_t max_copies = std::max<size_t>(kCopyBytes / page_size, 1);
  Result<std::unique_ptr<SpillBatch>> made = store_->NewBatch(static_cast<unsigned>(depth));
  std::unique_ptr<SpillBatch> batch;
  if (!made.ok()) {
    Log(0,
        "%s: the restore pipeline has no I/O queue (%s); restores read one page "
        "at a time and no copies are written ahead",
        who(), made.status().message().c_str());
  } else {
    batch = std::move(made).value();
    if (restore_wake_fd_ >= 0) (void)batch->SetWakeFd(restore_wake_fd_);
  }
  bool runs = true;  // off once the store refuses a run (it bounces reads)
  struct Op {
    enum class Kind : uint8_t { kFree, kRead, kCopy };
    Kind kind = Kind::kFree;
    MemfdRegion* r = nullptr;
    RegionPtr region;  // alive until the op ends
    uint32_t first = 0, count = 0;
    uint32_t slot = 0;
    std::vector<uint64_t> checksums;
    bool later = false;        // a read of RestoreJob::later jobs
    uint8_t* chunk = nullptr;  // a read's bytes, verified
    AlignedBuffer snapshot;    // a copy's bytes as written
  };
  // A read the pipeline cannot take (no batch, or its queue broke), one
  // page at a time through the store's synchronous lanes.
  auto read_page_by_page = [this](const Op& op, size_t tag) {
    SpillCompletion c;
    c.tag = tag;
    c.kind = IoKind::kRead;
    const size_t len = op.region->page_size;
    for (uint32_t k = 0; k < op.count && c.status.ok(); ++k) {
      c.status = store_->Read(op.slot + k, op.chunk + uint64_t{k} * len, len, op.checksums[k],
                              &c.failure, {op.region->id, op.first + k});
    }
    return c;
  };
  std::vector<Op> ops(batch ? batch->depth() : 1);
  AlignedBuffer slab;
  bool no_slab = false;  // it could not be made: faults read their pages
  std::vector<uint8_t*> free_chunks;
  // Chunks made after a broken queue kept some of the slab's; with
  // chunks_kept, the slab and these are kept to the end of the process
  // (KeepForever): a read of the broken queue may still land in one.
  std::vector<AlignedBuffer> spare_chunks;
  bool chunks_kept = false;
  // The slab is made once the store holds a page (so before the first
  // return, and without the device lock: filling 16 MiB of new memory took
  // tens of milliseconds here, and made at the first read it held the
  // first returning session's faults that long).
  auto make_slab = [&] {
    if (slab.data() || no_slab) return;
    Result<AlignedBuffer> made = AlignedBuffer::Allocate(max_pages * page_size);
    if (made.ok()) {
      slab = std::move(made).value();
      for (size_t at = 0; at + run_pages * page_size <= slab.size(); at += run_pages * page_size) {
        free_chunks.push_back(slab.data() + at);
      }
    } else {
      no_slab = true;
      Log(0,
          "%s: the restore pipeline has no read buffers (%s); faults read "
          "their pages one at a time",
          who(), made.status().message().c_str());
    }
  };
  size_t busy_pages = 0, copies = 0;
  size_t later_pages = 0;  // of busy_pages, reads of RestoreJob::later jobs
  const size_t max_later = std::max<size_t>(kLaterBytes / page_size, 1);
  Clock::time_point copy_again{};  // after a pass that found nothing to copy
  // Regions whose install failed, degraded once no read of ours is in
  // flight (degrading waits for the region's disk I/O, ours included).
  std::vector<std::pair<RegionPtr, MemfdRegion*>> to_degrade;
  // Reads completed and verified, their ops freed, wait here for an
  // install: by this thread, one a pass between its submissions, and by
  // its installer (`kvtier-install`), which installs one after another
  // while this thread submits and opens the next reads. The kernel's copy
  // into the memfd is most of a restore's CPU; in turns with the reads,
  // the disk idled while a pass installed.
  struct Finished {
    MemfdRegion* r;
    RegionPtr region;
    uint32_t first, count;
    uint8_t* chunk;
    uint8_t rank;  // install order: 0 waited on, 1 the faulting layer's, 2 later
  };
  struct Installs {
    Mutex mu;
    CondVar queued;  // a run to install, or stop
    CondVar ended;   // an install ended
    std::vector<Finished> runs GUARDED_BY(mu);
    // Installed (second: it failed): their chunks go back to free_chunks.
    std::vector<std::pair<Finished, bool>> done GUARDED_BY(mu);
    size_t busy GUARDED_BY(mu) = 0;  // runs queued or being installed
    bool stop GUARDED_BY(mu) = false;
  } installs;
  // Takes the first run of the lowest rank: a page an engine thread waits
  // on first, then the faulting layer's, then the other layers'.
  auto take_run = [&installs](Finished* out) {
    MutexLock lock(&installs.mu);
    if (installs.runs.empty()) return false;
    auto best =
        std::min_element(installs.runs.begin(), installs.runs.end(),
                         [](const Finished& a, const Finished& b) { return a.rank < b.rank; });
    *out = std::move(*best);
    installs.runs.erase(best);
    return true;
  };
  auto install_run = [this, &installs](Finished f) {
    const bool failed = !InstallRunFromPipeline(*f.r, f.first, f.count, f.chunk);
    MutexLock lock(&installs.mu);
    installs.done.emplace_back(std::move(f), failed);
    --installs.busy;
    installs.ended.Signal();
  };
  std::unique_ptr<std::thread> installer;
  if (std::thread::hardware_concurrency() > 1) {
    try {
      installer = std::make_unique<std::thread>([&installs, &take_run, &install_run] {
        MarkKvtierThread();
        pthread_setname_np(pthread_self(), "kvtier-install");
        for (;;) {
          {
            MutexLock lock(&installs.mu);
            while (!installs.stop && installs.runs.empty()) installs.queued.Wait(installs.mu);
            if (installs.runs.empty()) return;
          }
          Finished f;
          if (take_run(&f)) install_run(std::move(f));
        }
      });
    } catch (const std::system_error& e) {
      Log(1, "%s: no install thread (%s); the restore thread installs alone", who(), e.what());
    }
  }
  // Chunks of ended installs back to free_chunks, failed installs' regions
  // to to_degrade. Returns the installs still queued or under way.
  auto collect_installs = [&installs, &free_chunks, &to_degrade] {
    MutexLock lock(&installs.mu);
    for (auto& [f, failed] : installs.done) {
      free_chunks.push_back(f.chunk);
      if (failed) to_degrade.emplace_back(f.region, f.r);
    }
    installs.done.clear();
    return installs.busy;
  };
  for (;;) {
    if (!slab.data() && !no_slab && store_->used_slots() > 0) make_slab();
    std::vector<size_t> started;
    std::vector<Evicted> mapped_evicted;                 // by pages mapped back from host memory
    std::vector<std::pair<RegionPtr, uint32_t>> mapped;  // those pages
    const size_t installing = collect_installs();
    {
      MutexLock lock(&mu_);
      for (;;) {
        if (restore_stop_ || !restore_queue_.empty() || busy_pages > 0 || installing > 0 ||
            !to_degrade.empty()) {
          break;
        }
        // Replication cut short goes on once read-ahead pays again: until
        // then it waits (looping here would spin for up to kVainQuiet).
        const bool replicating = std::any_of(std::begin(streams_), std::end(streams_),
                                             [](const ReadStream& st) { return st.replicating; });
        if (replicating && ReadAheadPaysLocked()) break;
        // Idle: copies ahead are due now and then.
        const bool copies = batch && copy_ahead_;
        if (copies && Clock::now() >= copy_again) break;
        restorer_idle_ = true;
        if (replicating) {
          const Clock::time_point pays = last_vain_ + kVainQuiet;
          restore_work_.WaitUntil(mu_, copies ? std::min(pays, copy_again) : pays);
        } else if (copies) {
          restore_work_.WaitUntil(mu_, copy_again);
        } else {
          restore_work_.Wait(mu_);
        }
        restorer_idle_ = false;
      }
      if (restore_stop_) CancelRestoresLocked(nullptr);
      if (restore_stop_ && busy_pages == 0 && installing == 0) break;
      // Replication cut short by the ahead limit goes on as reads end.
      if (restoring_pages_ < AheadLimit() / 2 && ReadAheadPaysLocked()) {
        for (ReadStream& st : streams_) {
          if (st.replicating) ReplicateLocked(st);
        }
      }
      size_t i = 0;
      auto free_op = [&]() -> Op* {
        while (i < ops.size() && ops[i].kind != Op::Kind::kFree) ++i;
        return i < ops.size() ? &ops[i] : nullptr;
      };
      while (!restore_queue_.empty() && busy_pages < max_pages && free_op() != nullptr &&
             (!free_chunks.empty() || !slab.data())) {
        // Other layers' pages wait while enough of them are in flight
        // (they sit behind the faulting layer's in the queue).
        if (restore_queue_.front().later && later_pages >= max_later) break;
        RestoreJob job = restore_queue_.front();
        restore_queue_.pop_front();
        PageRecord& first = job.r->region->pages[job.page];
        if (!job.read) {
          // In host memory: mapped back now, no I/O (if still there; if it
          // went to disk meanwhile, it is read).
          if (job.r->degraded || job.r->releasing ||
              (first.flags.load(std::memory_order_relaxed) & kPageInFlight)) {
            continue;
          }
          const Tier tier = first.tier.load(std::memory_order_relaxed);
          if (tier == Tier::kHost) {
            if (BringInLocked(*job.r, job.page, &mapped_evicted).ok()) {
              Counters::Add(counters_.restored_ahead_pages);
              mapped.emplace_back(job.r->region, job.page);
            }
            continue;
          }
          if (tier != Tier::kDisk) continue;
          first.flags.fetch_or(kPageInFlight, std::memory_order_relaxed);
          ++job.r->disk_io;
          ++restoring_pages_;
        }
        make_slab();  // made already, unless this is the store's first page
        if (no_slab) {
          AbandonRunLocked(*job.r, job.page, 1);
          continue;
        }
        const Region& region = *job.r->region;
        Op& op = ops[i];
        op.chunk = free_chunks.back();
        free_chunks.pop_back();
        op.kind = Op::Kind::kRead;
        op.r = job.r;
        op.region = job.r->region;
        op.first = job.page;
        op.count = 1;
        op.slot = first.disk_slot;
        op.checksums.assign(1, first.checksum);
        // Neighbours in the region and in the file go in the same read; a
        // page a thread waits on goes alone, so that its read is short.
        const bool whole_slots =
            region.page_size == page_size && waiting_.count(region.PageAddr(job.page)) == 0;
        while (runs && whole_slots && op.count < run_pages && busy_pages + op.count < max_pages &&
               !restore_queue_.empty()) {
          const RestoreJob& next = restore_queue_.front();
          const PageRecord& rec = region.pages[next.page];
          if (!next.read || next.later != job.later || next.r != job.r ||
              next.page != op.first + op.count || rec.disk_slot != op.slot + op.count) {
            break;
          }
          op.checksums.push_back(rec.checksum);
          ++op.count;
          restore_queue_.pop_front();
        }
        op.later = job.later;
        busy_pages += op.count;
        if (op.later) later_pages += op.count;
        started.push_back(i);
      }
      // Copies ahead only while no restore is under way: they must not
      // delay a returning session.
      if (batch && restore_queue_.empty() && busy_pages == copies && copies < max_copies &&
          Clock::now() >= copy_again) {
        const std::vector<PageRef> picked = PickCopiesLocked(max_copies - copies);
        if (picked.empty()) copy_again = Clock::now() + kCopyIdleWait;
        for (const PageRef& p : picked) {
          if (free_op() == nullptr) break;
          Op& op = ops[i];
          // A snapshot, so that the bytes written are the bytes checksummed
          // even while the engine writes the page (the copy is then stale:
          // its write fault, or its hash at eviction, says so). Under the
          // lock, while the page is surely in the memfd: read through the
          // alias once it left, its hole would fill with a page of zeros,
          // which a restore's UFFDIO_COPY would then find and map.
          const size_t len = p.region->page_size;
          if (op.snapshot.size() < len) {
            Result<AlignedBuffer> b = AlignedBuffer::Allocate(len);
            if (!b.ok()) break;  // no copies this pass; a later one tries again
            op.snapshot = std::move(b).value();
          }
          const auto* from = static_cast<MemfdRegion*>(p.region->backend);
          // Write-protected first: a write after the snapshot raises a WP
          // fault, which clears kPageUnwritten (the copy is then stale, and
          // the page is hashed as it leaves).
          PageRecord& rec = p.region->pages[p.page];
          rec.flags.fetch_or(kPageCopying, std::memory_order_relaxed);
          if (from->protectable && uffd_.WriteProtect(p.region->PageAddr(p.page), len).ok()) {
            rec.flags.fetch_or(kPageUnwritten, std::memory_order_relaxed);
          }
          memcpy(op.snapshot.data(), from->views.alias + uint64_t{p.page} * len, len);
          op.kind = Op::Kind::kCopy;
          op.later = false;
          op.r = static_cast<MemfdRegion*>(p.region->backend);
          op.region = op.r->region;
          op.first = p.page;
          op.count = 1;
          ++op.r->disk_io;
          ++busy_pages;
          ++copies;
          started.push_back(i);
        }
      }
    }
    Report(mapped_evicted);
    for (const auto& [region, page] : mapped) {
      if (events_) events_->OnArrivedAhead(*region, page, 1, Tier::kHost);
    }
    std::vector<SpillCompletion> done;
    for (size_t i : started) {
      Op& op = ops[i];
      const size_t len = op.region->page_size;
      if (op.kind == Op::Kind::kCopy) {
        // The snapshot taken above.
        batch->AddWrite(op.snapshot.data(), len, i, {op.region->id, op.first});
      } else if (!batch) {
        done.push_back(read_page_by_page(op, i));
      } else if (op.count == 1) {
        batch->AddRead(op.slot, op.chunk, len, op.checksums[0], i, {op.region->id, op.first});
      } else {
        batch->AddReadRun(op.slot, op.count, op.chunk, op.checksums.data(), i,
                          {op.region->id, op.first});
      }
    }
    // On their way before the installs below.
    if (batch && !started.empty()) batch->Submit();
    // One install on this thread, then back to submit (reads that wait
    // for a chunk get the one it frees).
    Finished run;
    const bool took = take_run(&run);
    if (took) install_run(std::move(run));
    if (!took && installing > 0 && (!batch || batch->outstanding() == 0) && done.empty()) {
      // Nothing to read or open until the installer gives a chunk back.
      MutexLock lock(&installs.mu);
      while (installs.done.empty() && installs.busy > 0) installs.ended.Wait(installs.mu);
    } else if (!took && batch && batch->outstanding() > 0 && done.empty()) {
      Status broken = batch->WaitAny(&done);
      if (!broken.ok()) {
        // The queue broke: reads it did not complete are read page by page
        // (copies are dropped), and the next ones get a new queue. Given up
        // first: that waits out its reads still in flight. A chunk that one
        // may still write after that is never used again (the slab is kept
        // to the end), and its pages are read into a new chunk.
        Log(0, "%s: restore pipeline: %s", who(), broken.message().c_str());
        std::vector<bool> reported(ops.size(), false);
        for (const SpillCompletion& c : done) reported[c.tag] = true;
        for (uint64_t i : batch->Abandon()) {
          chunks_kept = true;
          Result<AlignedBuffer> fresh = AlignedBuffer::Allocate(size_t{run_pages} * page_size);
          ops[i].chunk = fresh.ok() ? fresh.value().data() : nullptr;
          if (fresh.ok()) spare_chunks.push_back(std::move(fresh).value());
        }
        batch.reset();
        for (size_t i = 0; i < ops.size(); ++i) {
          Op& op = ops[i];
          if (op.kind == Op::Kind::kFree || reported[i]) continue;
          if (op.kind == Op::Kind::kRead && op.chunk == nullptr) {
            // No memory for a new chunk: the pages wait for their faults.
            SpillCompletion c;
            c.tag = i;
            c.kind = IoKind::kRead;
            c.failure = ReadFailure::kBadRequest;
            c.status = Status::Error("no memory for a read buffer");
            done.push_back(std::move(c));
          } else if (op.kind == Op::Kind::kCopy) {
            SpillCompletion c;
            c.tag = i;
            c.kind = IoKind::kWrite;
            c.status = broken;
            done.push_back(std::move(c));
          } else {
            done.push_back(read_page_by_page(op, i));
          }
        }
        Result<std::unique_ptr<SpillBatch>> again = store_->NewBatch(static_cast<unsigned>(depth));
        if (again.ok()) batch = std::move(again).value();
        if (batch && restore_wake_fd_ >= 0) (void)batch->SetWakeFd(restore_wake_fd_);
      }
    }
    std::vector<Finished> landed;
    for (SpillCompletion& c : done) {
      Op& op = ops[c.tag];
      busy_pages -= op.count;
      if (op.later) later_pages -= op.count;
      if (op.kind == Op::Kind::kCopy) {
        // Booked at once (it is cheap): the page must show its copy before
        // the next pass picks pages to copy.
        MutexLock lock(&mu_);
        FinishCopyLocked(*op.r, op.first,
                         c.status.ok() ? Result<SpillSlot>(c.slot) : Result<SpillSlot>(c.status));
        --copies;
        op.region.reset();
      } else if (c.status.ok()) {
        landed.push_back({op.r, std::move(op.region), op.first, op.count, op.chunk,
                          static_cast<uint8_t>(op.later ? 2 : 1)});
        op.chunk = nullptr;
      } else if (c.failure == ReadFailure::kBadRequest) {
        // A run the store would bounce: its pages wait for their faults,
        // and later restores read one page at a time. (Without a chunk:
        // none could be had after a broken queue; the next runs may go.)
        if (op.count > 1 && op.chunk != nullptr) runs = false;
        MutexLock lock(&mu_);
        AbandonRunLocked(*op.r, op.first, op.count);
        if (op.chunk != nullptr) free_chunks.push_back(op.chunk);
        op.chunk = nullptr;
        op.region.reset();
      } else {
        // Read twice and still wrong: the page's only copy is gone.
        StopOnLostPage(*store_, op.region->id, op.region->tag, op.first, c.status);
      }
      op.kind = Op::Kind::kFree;
    }
    size_t pending = installing;  // installs queued or under way
    if (!landed.empty()) {
      // Ranked now: a page an engine thread waits on goes first.
      {
        MutexLock lock(&mu_);
        for (Finished& f : landed) {
          for (uint32_t k = 0; k < f.count && f.rank != 0; ++k) {
            if (waiting_.count(f.region->PageAddr(f.first + k)) != 0) f.rank = 0;
          }
        }
      }
      MutexLock lock(&installs.mu);
      installs.busy += landed.size();
      pending = installs.busy;
      for (Finished& f : landed) installs.runs.push_back(std::move(f));
      if (installer) installs.queued.Signal();
    }
    // Not while installs are queued: degrading waits for the region's
    // installs, which may be this thread's to do.
    if (!to_degrade.empty() && busy_pages == 0 && pending == 0) {
      MutexLock lock(&mu_);
      for (const auto& [region, r] : to_degrade) {
        // Unless it was destroyed meanwhile.
        if (region->backend == r) {
          DegradeLocked(*r, Status::Error("restored pages could not be installed"));
        }
      }
      to_degrade.clear();
    }
  }
  if (installer) {
    {
      MutexLock lock(&installs.mu);
      installs.stop = true;
      installs.queued.Signal();
    }
    installer->join();
  }
  if (chunks_kept) {
    KeepForever(std::move(slab));
    for (AlignedBuffer& b : spare_chunks) KeepForever(std::move(b));
  }
}

}  // namespace kvtier
