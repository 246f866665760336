// UvmDevice's disk tier: the gate (sealing an idle process, opening it on a
// submission), dormant ranges, spills and restores (the protocol is in
// uvm_device.h). Disk I/O runs with the transition lock released; the page's
// kPageInFlight flag and the region's disk_io count keep it in place.
#include <algorithm>
#include <array>
#include <cstring>
#include <map>

#include "runtime/clock.h"
#include "runtime/device/cuda/uvm_device.h"
#include "runtime/device/cuda/uvm_region.h"
#include "runtime/internal_thread.h"
#include "runtime/log.h"
#include "runtime/storage/page_io.h"

namespace kvtier::cuda {
namespace {

// What a restore keeps queued or in flight: at least 32 pages and 8 MiB
// (its runs' buffers; the disk reads them while the pages before are
// opened and copied).
constexpr size_t kRestoreWindowPages = 32;
constexpr size_t kRestoreWindowBytes = size_t{8} << 20;
// A run of pages is read with one request of at most kMaxRestoreReadBytes
// (page_io.h). Of a window, the store's queue depth of runs is in flight:
// 32 requests for pages of 64 KiB, 4 MiB.

// A run's most pages, and the bytes a restore keeps queued or in flight,
// for pages of `page_size`.
size_t RestoreRunPages(size_t page_size) {
  return std::max<size_t>(1, kMaxRestoreReadBytes / std::max<size_t>(page_size, 1));
}
size_t RestoreWindowBytes(size_t page_size) {
  return std::max(kRestoreWindowPages * page_size, kRestoreWindowBytes);
}
size_t DivideUp(size_t a, size_t b) { return (a + b - 1) / b; }
// Buffers of `bytes` for a restore of pages of `page_size`: a window's, and
// the copies the lane's helper may still hold of runs before it.
size_t WindowBuffers(size_t page_size, size_t bytes) {
  return DivideUp(RestoreWindowBytes(page_size), bytes) + DivideUp(CopyLane::kBacklogBytes, bytes) +
         2;
}

// Submissions this thread entered and has not yet left (an exit without an
// enter, from a call that began before the watch started, is ignored).
[[gnu::tls_model("initial-exec")]] constinit thread_local int t_submits = 0;

// Maps a GPU's discarded pages on the host in one prefetch on its stream
// (a prefetch populates memory that has none), so that the restore's copies
// into them do not fault each 4 KiB in. Best effort: where the prefetch
// fails, the copies fault the pages in as before.
struct HostFill {
  CUcontext context = nullptr;
  CUstream stream = nullptr;
  std::vector<CUdeviceptr> ptrs;
  std::vector<size_t> sizes;

  void Add(uintptr_t addr, size_t bytes) {
    ptrs.push_back(static_cast<CUdeviceptr>(addr));
    sizes.push_back(bytes);
  }
  // Maps what was added, and forgets it.
  void Map(const DriverApi& api) {
    if (ptrs.empty()) return;
    ScopedContext scope(api, context);
    if (scope.result() == CUDA_SUCCESS &&
        api.PrefetchRanges(ptrs.data(), sizes.data(), ptrs.size(), /*to_host=*/true, 0, stream) ==
            CUDA_SUCCESS) {
      api.cuStreamSynchronize(stream);
    }
    ptrs.clear();
    sizes.clear();
  }
};

}  // namespace

bool UvmDevice::GatedLocked(const PageRecord& rec) const {
  return (rec.flags.load(std::memory_order_relaxed) & kPageDormant) != 0 ||
         sealed_.load(std::memory_order_acquire);
}

void UvmDevice::UpdateClosedLocked() {
  closed_.store(sealed_.load(std::memory_order_relaxed) || sealing_ || !pending_.empty(),
                std::memory_order_seq_cst);
}

void UvmDevice::EndDiskIoLocked(UvmRegion& r) {
  --r.disk_io;
  --disk_io_;
  disk_io_done_.SignalAll();
}

void UvmDevice::OnSubmitEnter() {
  // A fork child's CUDA calls fail on their own; the parent's pages are not
  // the child's to restore.
  if (t_kvtier_thread || t_backend_depth > 0 || forked_.load(std::memory_order_relaxed)) return;
  ++t_submits;
  in_flight_.fetch_add(1, std::memory_order_seq_cst);
  last_submit_ns_.store(MonotonicNs(), std::memory_order_relaxed);
  if (closed_.load(std::memory_order_seq_cst)) OpenGate();
}

void UvmDevice::OnSubmitExit() {
  if (t_kvtier_thread || t_backend_depth > 0 || t_submits == 0) return;
  --t_submits;
  in_flight_.fetch_sub(1, std::memory_order_seq_cst);
}

void UvmDevice::OpenGate() {
  BackendScope scope;
  const uint64_t start = MonotonicNs();
  bool stalled = false;
  MutexLock lock(&mu_);
  ++gate_epoch_;  // a seal being fenced now gives up
  sealing_ = false;
  sealed_.store(false, std::memory_order_seq_cst);
  // Spills in flight find the gate open when they end and keep their pages;
  // what already reached the disk comes back now.
  while (!pending_.empty()) {
    stalled = true;
    std::vector<PageKey> idle;
    for (const PageKey& key : pending_) {
      const uint8_t flags =
          key.first->region->pages[key.second].flags.load(std::memory_order_relaxed);
      if (!(flags & kPageInFlight)) idle.push_back(key);
    }
    if (idle.empty()) {
      disk_io_done_.Wait(mu_);  // another thread restores them
    } else {
      RestoreLocked(idle);
    }
  }
  UpdateClosedLocked();
  if (stalled) {
    Counters::Add(counters_.gate_stalls);
    Counters::Add(counters_.gate_stall_ns, MonotonicNs() - start);
  }
}

void UvmDevice::CheckIdle() {
  if (store_ == nullptr || !gating_ || config_.idle_ns == 0 || forked_.load()) return;
  uint64_t epoch = 0;
  std::vector<CUcontext> contexts;
  {
    MutexLock lock(&mu_);
    if (sealed_.load(std::memory_order_relaxed) || sealing_) return;
    const uint64_t now = MonotonicNs();
    const uint64_t last = last_submit_ns_.load(std::memory_order_relaxed);
    if (last > now || now - last < config_.idle_ns) return;
    if (by_base_.empty()) return;  // nothing to spill
    sealing_ = true;
    closed_.store(true, std::memory_order_seq_cst);
    if (in_flight_.load(std::memory_order_seq_cst) != 0) {
      // A call is between enter and exit: it may be queueing work now.
      sealing_ = false;
      UpdateClosedLocked();
      return;
    }
    epoch = gate_epoch_;
    for (const DeviceState& d : devices_) {
      if (d.ready) contexts.push_back(d.context);
    }
  }
  // Every call that entered before closed_ was set has returned, so its
  // work is queued; every later one opens the gate first. Wait for the
  // queued work on every GPU: then nothing that runs can reach a region.
  CUresult r = CUDA_SUCCESS;
  for (CUcontext ctx : contexts) {
    ScopedContext scope(config_.api, ctx);
    r = scope.result();
    if (r == CUDA_SUCCESS) r = config_.api.cuCtxSynchronize();
    if (r != CUDA_SUCCESS) break;
  }
  MutexLock lock(&mu_);
  if (gate_epoch_ != epoch) return;  // opened meanwhile
  sealing_ = false;
  if (r != CUDA_SUCCESS) {
    UpdateClosedLocked();
    static std::atomic<bool> warned{false};
    WarnOnce(&warned,
             "CUDA disk tier: waiting for queued GPU work failed (%s); idle regions are not "
             "spilled",
             config_.api.ErrorName(r));
    return;
  }
  sealed_.store(true, std::memory_order_seq_cst);
  UpdateClosedLocked();
  Counters::Add(counters_.idle_seals);
  Log(2, "CUDA disk tier: no GPU work for %llu ms; sealed (idle pages may go to SSD)",
      static_cast<unsigned long long>(config_.idle_ns / 1'000'000));
}

Status UvmDevice::Spill(Region& region, uint32_t page) {
  Status result;
  const PageRef ref{&region, page};
  SpillPages({&ref, 1}, {&result, 1});
  return result;
}

void UvmDevice::SpillPages(std::span<const PageRef> pages, std::span<Status> results) {
  BackendScope scope;
  if (Status s = Usable(); !s.ok()) {
    for (Status& r : results) r = s;
    return;
  }
  if (store_ == nullptr) {
    for (Status& r : results) {
      r = Status::Error("CUDA backend: there is no disk tier to spill to (set KVTIER_DISK_BUDGET)");
    }
    return;
  }
  struct Job {
    UvmRegion* r;
    uint32_t page;
    size_t index;  // into pages and results
    bool zero = false;
    Result<SpillSlot> written = Status::Error("not written");
  };
  std::vector<Job> jobs;
  {
    MutexLock lock(&mu_);
    for (size_t i = 0; i < pages.size(); ++i) {
      results[i] = Status::Ok();
      Result<UvmRegion*> found = FindLocked(*pages[i].region, pages[i].page);
      if (!found.ok()) {
        results[i] = found.status();
        continue;
      }
      UvmRegion* r = found.value();
      PageRecord& rec = r->region->pages[pages[i].page];
      // Gone up again, moving, or no longer dormant nor sealed: nothing to do.
      if (rec.tier.load(std::memory_order_relaxed) != Tier::kHost || r->releasing ||
          (rec.flags.load(std::memory_order_relaxed) & kPageInFlight) || !GatedLocked(rec)) {
        continue;
      }
      rec.flags.fetch_or(kPageInFlight, std::memory_order_relaxed);
      ++r->disk_io;
      ++disk_io_;
      jobs.push_back({r, pages[i].page, i});
    }
  }
  if (jobs.empty()) return;
  // The bytes are read from the host (the page is there, and no GPU work
  // touches it: it is dormant or sealed); a page of zeros is not written.
  std::vector<PageIo::Source> sources;
  std::vector<size_t> source_job;
  for (size_t j = 0; j < jobs.size(); ++j) {
    const Region& region = *jobs[j].r->region;
    const auto* bytes = reinterpret_cast<const uint8_t*>(region.PageAddr(jobs[j].page));
    jobs[j].zero = IsAllZero(bytes, region.page_size);
    if (!jobs[j].zero) {
      sources.push_back({bytes, region.page_size, {region.id, jobs[j].page}});
      source_job.push_back(j);
    }
  }
  if (!sources.empty()) {
    page_io_.Write(sources, [&](size_t k, const Result<SpillSlot>& slot) {
      jobs[source_job[k]].written = slot;
    });
    // The store holds a page now: the maintenance thread makes the read
    // buffers its return will take (not here: the policy times its spills).
    Buffers none = Buffers::kNone;
    if (restore_buffers_.load(std::memory_order_relaxed) == none &&
        std::any_of(jobs.begin(), jobs.end(), [](const Job& j) { return j.written.ok(); })) {
      restore_buffers_.compare_exchange_strong(none, Buffers::kDue, std::memory_order_relaxed);
    }
  }
  MutexLock lock(&mu_);
  std::map<CUdevice, std::vector<size_t>> by_device;  // jobs to discard
  for (size_t j = 0; j < jobs.size(); ++j) {
    Job& job = jobs[j];
    PageRecord& rec = job.r->region->pages[job.page];
    if (!job.zero && !job.written.ok()) {
      // The store counted it and backs off; the host copy is the page.
      results[job.index] = job.written.status().Annotate("CUDA disk tier: spill of region " +
                                                         std::to_string(job.r->region->id) +
                                                         " page " + std::to_string(job.page));
      continue;
    }
    if (rec.tier.load(std::memory_order_relaxed) != Tier::kHost || !GatedLocked(rec)) {
      // Woken, or the gate opened, while it was written: the GPU may use it.
      if (!job.zero) store_->Free(job.written.value().index);
      continue;
    }
    by_device[job.r->device].push_back(j);
  }
  for (const auto& [device, group] : by_device) {
    std::vector<PageKey> keys;
    for (size_t j : group) keys.push_back({jobs[j].r, jobs[j].page});
    const Status discarded = DiscardLocked(keys);
    for (size_t j : group) {
      Job& job = jobs[j];
      PageRecord& rec = job.r->region->pages[job.page];
      if (!discarded.ok()) {
        if (!job.zero) store_->Free(job.written.value().index);
        results[job.index] = discarded;
        continue;
      }
      rec.disk_slot = job.zero ? kZeroSlot : job.written.value().index;
      rec.checksum = job.zero ? 0 : job.written.value().checksum;
      SetTierLocked(*job.r, job.page, Tier::kDisk);
      if (job.zero) Counters::Add(counters_.zero_pages_dropped);
      if (!(rec.flags.load(std::memory_order_relaxed) & kPageDormant)) {
        pending_.insert({job.r, job.page});
      }
    }
  }
  for (Job& job : jobs) {
    job.r->region->pages[job.page].flags.fetch_and(static_cast<uint8_t>(~kPageInFlight),
                                                   std::memory_order_relaxed);
    EndDiskIoLocked(*job.r);
  }
  UpdateClosedLocked();
}

Status UvmDevice::DiscardLocked(const std::vector<PageKey>& pages) {
  if (pages.empty()) return Status::Ok();
  const UvmRegion& first = *pages.front().first;
  const DeviceState& dev = devices_[first.device];
  std::vector<CUdeviceptr> ptrs;
  std::vector<size_t> sizes;
  for (const PageKey& key : pages) {
    const Region& region = *key.first->region;
    ptrs.push_back(static_cast<CUdeviceptr>(region.PageAddr(key.second)));
    sizes.push_back(region.page_size);
  }
  const DriverApi& api = config_.api;
  ScopedContext ctx(api, dev.context);
  CUresult r = ctx.result();
  if (r == CUDA_SUCCESS) r = api.DiscardRanges(ptrs.data(), sizes.data(), ptrs.size(), dev.stream);
  if (r == CUDA_SUCCESS) r = api.cuStreamSynchronize(dev.stream);
  if (r != CUDA_SUCCESS) {
    return Status::Errorf(
        "CUDA disk tier: discarding %zu spilled pages on GPU %d failed (%s); they stay in memory",
        pages.size(), static_cast<int>(first.device), api.ErrorName(r));
  }
  return Status::Ok();
}

size_t UvmDevice::RestoreBuffers(size_t page_size) {
  page_size = std::max<size_t>(page_size, 1);
  return WindowBuffers(page_size, page_size);
}

void UvmDevice::MakeRestoreBuffers() {
  Buffers due = Buffers::kDue;
  if (!restore_buffers_.compare_exchange_strong(due, Buffers::kMade, std::memory_order_relaxed)) {
    return;
  }
  // As RestoreLocked reads: whole runs.
  const size_t page = store_->page_size();
  const size_t run = RestoreRunPages(page) * page;
  scratch_.Fill(WindowBuffers(page, run), run);
}

void UvmDevice::RestoreLocked(const std::vector<PageKey>& pages) {
  struct Job {
    UvmRegion* r;
    uint32_t page;
    uint32_t slot;
  };
  std::vector<Job> jobs;
  std::vector<uint64_t> checksums;            // jobs[j]'s, in a run's order for the store
  std::array<HostFill, kMaxDevices> fills{};  // each GPU's context and stream
  for (const PageKey& key : pages) {
    const DeviceState& d = devices_[key.first->device];  // ready since the region's creation
    fills[key.first->device].context = d.context;
    fills[key.first->device].stream = d.stream;
  }
  for (const PageKey& key : pages) {
    PageRecord& rec = key.first->region->pages[key.second];
    if (rec.tier.load(std::memory_order_relaxed) != Tier::kDisk ||
        (rec.flags.load(std::memory_order_relaxed) & kPageInFlight)) {
      continue;
    }
    rec.flags.fetch_or(kPageInFlight, std::memory_order_relaxed);
    ++key.first->disk_io;
    ++disk_io_;
    jobs.push_back({key.first, key.second, rec.disk_slot});
    checksums.push_back(rec.checksum);
  }
  if (jobs.empty()) return;
  mu_.Unlock();
  // Into private buffers first: the store verifies each page before a byte
  // of it reaches memory the GPU can see. Consecutive pages of a region in
  // consecutive slots (a spill group) are read as one run, into one
  // buffer, with one request, a window's worth of them in flight: with a
  // request a 64 KiB page, and chunks of 16 MiB that drained before the
  // next began, the disk idled (kvtier_wait at 0.6-0.8x raw reads). A
  // run's buffer is taken as its read is queued and given back once it is
  // copied.
  const size_t store_page = store_->page_size();
  const size_t max_run = RestoreRunPages(store_page);
  struct Run {
    size_t job;  // the first page's
    uint32_t pages;
    AlignedBuffer buffer;
  };
  std::vector<Run> runs;  // never moved once reading starts: copies hold them
  std::vector<size_t> zeros;
  for (size_t j = 0; j < jobs.size(); ++j) {
    if (jobs[j].slot == kZeroSlot) {
      zeros.push_back(j);
      continue;
    }
    const bool next_job = !runs.empty() && runs.back().job + runs.back().pages == j;
    const Job* last = next_job ? &jobs[j - 1] : nullptr;
    if (last != nullptr && last->r == jobs[j].r && last->page + 1 == jobs[j].page &&
        last->slot + 1 == jobs[j].slot && runs.back().pages < max_run) {
      ++runs.back().pages;
    } else {
      runs.push_back({j, 1, AlignedBuffer()});
    }
  }
  // The CPU's write of every byte undoes the discard; the page is on the
  // host until the GPU faults it in or the policy promotes it. The
  // discarded memory is mapped on the host before its first copy, in one
  // prefetch per GPU for about a window's worth of runs (those queued when
  // the first of them lands, or a window's worth queued), while the reads
  // are in flight: a CPU write would fault it in 4 KiB at a time through
  // the driver. On an H200, per 2 MiB page: 3.6 ms to copy into discarded
  // memory, against 0.18 ms to map it (the prefetch does that work in the
  // call) and 0.34 ms to copy into it.
  size_t to_map = 0;  // bytes added to the fills and not yet mapped
  size_t queued = 0;  // runs asked for by the reads
  size_t mapped = 0;  // runs[0, mapped) are mapped
  const auto add_to_map = [&](const Job& job, uint32_t pages) {
    const Region& region = *job.r->region;
    fills[job.r->device].Add(region.PageAddr(job.page), pages * region.page_size);
    to_map += pages * region.page_size;
  };
  const auto map_added = [&] {
    for (HostFill& fill : fills) fill.Map(config_.api);
    to_map = 0;
    mapped = queued;
  };
  const size_t window = RestoreWindowBytes(store_page);
  // Each run is copied as its read completes, on this thread or the lane's
  // helper: the copies of one thread could not keep up with a disk of 2
  // GB/s (a core busy). One page's is made here, at once.
  CopyLane::Batch copies(copies_, /*share=*/jobs.size() > 1);
  page_io_.ReadRuns(
      runs.size(),
      [&](size_t i) {
        Run& run = runs[i];
        const Job& first = jobs[run.job];
        const Region& region = *first.r->region;
        run.buffer = scratch_.Take(run.pages * region.page_size);
        if (run.buffer.data() == nullptr) {
          StopOnLostPage(*store_, region.id, region.tag, first.page,
                         Status::Error("no memory for a buffer to read it into"));
        }
        add_to_map(first, run.pages);
        queued = i + 1;
        if (to_map >= window) map_added();
        return PageIo::RunTarget{
            first.slot, run.pages, &checksums[run.job], run.buffer.data(), {region.id, first.page}};
      },
      window,
      [&](size_t i, uint32_t k, const Status& read) {
        Run& run = runs[i];
        const Job& first = jobs[run.job];
        const Region& region = *first.r->region;
        if (!read.ok()) StopOnLostPage(*store_, region.id, region.tag, first.page + k, read);
        if (k + 1 < run.pages) return;  // the run's pages land together, in order
        if (i >= mapped) map_added();   // this run's range among them
        // A region's pages are contiguous: the run is one copy.
        copies.Copy(reinterpret_cast<void*>(region.PageAddr(first.page)), run.buffer.data(),
                    run.pages * region.page_size,
                    [this, &run] { scratch_.Return(std::move(run.buffer)); });
      },
      [&](size_t i) {
        // A read of a broken queue may still land in the run's buffer.
        Run& run = runs[i];
        const Region& region = *jobs[run.job].r->region;
        KeepForever(std::move(run.buffer));
        run.buffer = scratch_.Take(run.pages * region.page_size);
        if (run.buffer.data() == nullptr) {
          StopOnLostPage(*store_, region.id, region.tag, jobs[run.job].page,
                         Status::Error("no memory for a buffer to read it into"));
        }
        return run.buffer.data();
      });
  for (size_t j : zeros) add_to_map(jobs[j], 1);
  map_added();
  for (size_t j : zeros) {
    const Region& region = *jobs[j].r->region;
    memset(reinterpret_cast<void*>(region.PageAddr(jobs[j].page)), 0, region.page_size);
  }
  copies.Wait();
  mu_.Lock();
  for (Job& job : jobs) {
    PageRecord& rec = job.r->region->pages[job.page];
    if (job.slot != kZeroSlot) store_->Free(job.slot);
    SetTierLocked(*job.r, job.page, Tier::kHost);
    rec.flags.fetch_and(static_cast<uint8_t>(~kPageInFlight), std::memory_order_relaxed);
    pending_.erase({job.r, job.page});
    EndDiskIoLocked(*job.r);
  }
  UpdateClosedLocked();
}

void UvmDevice::RestoreRangeLocked(UvmRegion& r, uint32_t first, uint32_t count) {
  const uint32_t end =
      static_cast<uint32_t>(std::min<uint64_t>(uint64_t{first} + count, r.region->pages.size()));
  while (true) {
    std::vector<PageKey> spilled;
    bool moving = false;
    for (uint32_t p = first; p < end; ++p) {
      const PageRecord& rec = r.region->pages[p];
      if (rec.flags.load(std::memory_order_relaxed) & kPageInFlight) {
        moving = true;  // a spill or a restore of it ends first
      } else if (rec.tier.load(std::memory_order_relaxed) == Tier::kDisk) {
        spilled.push_back({&r, p});
      }
    }
    if (!spilled.empty()) {
      RestoreLocked(spilled);
    } else if (moving) {
      disk_io_done_.Wait(mu_);
    } else {
      return;
    }
  }
}

Status UvmDevice::SetDormant(Region& region, uint32_t first, uint32_t count, bool dormant) {
  BackendScope scope;
  if (Status s = Usable(); !s.ok()) return s;
  MutexLock lock(&mu_);
  Result<UvmRegion*> found = FindLocked(region, first);
  if (!found.ok()) return found.status();
  UvmRegion& r = *found.value();
  const uint32_t end =
      static_cast<uint32_t>(std::min<uint64_t>(uint64_t{first} + count, region.pages.size()));
  bool woke_spilled = false;
  for (uint32_t p = first; p < end; ++p) {
    PageRecord& rec = region.pages[p];
    const bool was = (rec.flags.load(std::memory_order_relaxed) & kPageDormant) != 0;
    const bool on_disk = rec.tier.load(std::memory_order_relaxed) == Tier::kDisk;
    if (dormant && !was) {
      rec.flags.fetch_or(kPageDormant, std::memory_order_relaxed);
      if (on_disk) pending_.erase({&r, p});
    } else if (!dormant && was) {
      rec.flags.fetch_and(static_cast<uint8_t>(~kPageDormant), std::memory_order_relaxed);
      if (on_disk) {
        pending_.insert({&r, p});
        woke_spilled = true;
      }
    }
  }
  // Nothing can hold the engine's next submission back until they are
  // here: bring them now.
  if (woke_spilled && !gating_) RestoreRangeLocked(r, first, end - first);
  UpdateClosedLocked();
  return Status::Ok();
}

Status UvmDevice::Restore(Region& region, uint32_t first, uint32_t count) {
  if (Status s = SetDormant(region, first, count, false); !s.ok()) return s;
  BackendScope scope;
  MutexLock lock(&mu_);
  Result<UvmRegion*> found = FindLocked(region, first);
  if (!found.ok()) return found.status();
  if (store_ != nullptr) RestoreRangeLocked(*found.value(), first, count);
  return Status::Ok();
}

}  // namespace kvtier::cuda
