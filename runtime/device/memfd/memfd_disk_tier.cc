// MemfdDevice's disk tier: spilling host pages to the SpillStore and restoring
// them on a fault or a Promote (the protocol is in memfd_device.h). Disk I/O
// runs with the transition lock released; the page's kPageInFlight flag and
// the region's disk_io count keep the page and the region in place meanwhile.
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <cerrno>

#include "runtime/device/memfd/memfd_device.h"
#include "runtime/log.h"
#include "runtime/storage/checksum.h"

namespace kvtier {

Status MemfdDevice::Spill(Region& region, uint32_t page) {
  Status result;
  const PageRef ref{&region, page};
  SpillPages({&ref, 1}, {&result, 1});
  return result;
}

void MemfdDevice::SpillPages(std::span<const PageRef> pages, std::span<Status> results) {
  if (Status unusable = Usable(); !unusable.ok()) {
    for (Status& r : results) r = unusable;
    return;
  }
  if (store_ == nullptr) {
    for (size_t i = 0; i < pages.size(); ++i) {
      results[i] = Status::Errorf(
          "%s: region %u page %u: there is no disk tier to spill to (set "
          "KVTIER_DISK_BUDGET)",
          who(), pages[i].region->id, pages[i].page);
    }
    return;
  }
  std::vector<Leaving> jobs;
  {
    MutexLock lock(&mu_);
    for (size_t i = 0; i < pages.size(); ++i) {
      Result<MemfdRegion*> begun = BeginSpillLocked(*pages[i].region, pages[i].page);
      results[i] = begun.status();
      if (begun.ok() && begun.value() != nullptr) jobs.push_back({begun.value(), pages[i].page, i});
    }
  }
  if (jobs.empty()) return;
  jobs = LeaveUnwritten(jobs, results);
  if (jobs.empty()) return;
  // In page order, so that a run of pages lands in a run of slots (the
  // store hands them out next-fit) and comes back in few reads.
  std::sort(jobs.begin(), jobs.end(), [](const Leaving& a, const Leaving& b) {
    return a.r->region->id != b.r->region->id ? a.r->region->id < b.r->region->id : a.page < b.page;
  });
  std::vector<PageIo::Source> sources;
  for (const Leaving& j : jobs) {
    const size_t len = j.r->region->page_size;
    sources.push_back({j.r->views.alias + uint64_t{j.page} * len, len, {j.r->region->id, j.page}});
  }
  // Each page is punched and booked as soon as its write completes, under
  // the lock for that page alone, while the others are still in flight.
  page_io_.Write(sources, [&](size_t j, const Result<SpillSlot>& written) {
    MutexLock lock(&mu_);
    results[jobs[j].index] = FinishSpillLocked(*jobs[j].r, jobs[j].page, written);
    EndDiskIoLocked(*jobs[j].r);
  });
}

std::vector<MemfdDevice::Leaving> MemfdDevice::LeaveUnwritten(const std::vector<Leaving>& jobs,
                                                              std::span<Status> results) {
  // The pages' PTEs in the engine view are zapped, so the engine cannot
  // change them without a fault (which marks them touched). Hashed with the
  // lock released: a fault meanwhile is served, and the page stays.
  std::vector<Leaving> writes;
  std::vector<Leaving> zeros;
  std::vector<Leaving> clean;
  for (const Leaving& j : jobs) {
    const size_t len = j.r->region->page_size;
    const uint8_t* bytes = j.r->views.alias + uint64_t{j.page} * len;
    if (CopyKnownCurrent(j.r->region->pages[j.page]) ||
        CopyIsCurrent(*j.r->region, j.page, bytes)) {
      clean.push_back(j);
    } else {
      (IsAllZero(bytes, len) ? zeros : writes).push_back(j);
    }
  }
  if (zeros.empty() && clean.empty()) return writes;
  MutexLock lock(&mu_);
  // Those not touched meanwhile leave memory, punched out in runs of
  // neighbours: one fallocate (and one shootdown of the alias view's PTEs)
  // a run, not one a page.
  struct Leave {
    PageOf at;
    size_t index;
    bool zero;
  };
  std::vector<Leave> leave;
  for (const std::vector<Leaving>* list : {&zeros, &clean}) {
    for (const Leaving& j : *list) {
      PageRecord& rec = j.r->region->pages[j.page];
      const uint8_t flags =
          rec.flags.fetch_and(static_cast<uint8_t>(~(kPageInFlight | kPageTouchedDuringMove)),
                              std::memory_order_relaxed);
      if (!(flags & kPageTouchedDuringMove) && !j.r->degraded &&
          rec.tier.load(std::memory_order_relaxed) == Tier::kHost) {
        leave.push_back({{j.r, j.page}, j.index, list == &zeros});
      }
      EndDiskIoLocked(*j.r);
    }
  }
  std::sort(leave.begin(), leave.end(),
            [](const Leave& x, const Leave& y) { return PageOrder(x.at, y.at); });
  std::vector<PageOf> at;
  at.reserve(leave.size());
  for (const Leave& l : leave) at.push_back(l.at);
  std::vector<Status> punched = PunchRuns(at);
  for (size_t i = 0; i < leave.size(); ++i) {
    const Leave& l = leave[i];
    if (!punched[i].ok()) {
      results[l.index] = punched[i];  // it stays in host memory
    } else if (l.zero) {
      DroppedZeroPageLocked(*l.at.r, l.at.page);
    } else {
      LeftForCopyLocked(*l.at.r, l.at.page);
    }
  }
  return writes;
}

Result<MemfdRegion*> MemfdDevice::BeginSpillLocked(Region& region, uint32_t page) {
  Result<MemfdRegion*> found = FindLocked(region, page);
  if (!found.ok()) return found.status();
  MemfdRegion* r = found.value();
  PageRecord& rec = region.pages[page];
  if (rec.tier.load(std::memory_order_relaxed) != Tier::kHost ||
      (rec.flags.load(std::memory_order_relaxed) & kPageInFlight)) {
    return nullptr;  // hot again, already spilled or moving, or no bytes yet
  }
  if (region.page_size > store_->page_size()) {
    return Status::Errorf(
        "%s: region %u has %zu-byte pages, larger than the disk tier's %zu-byte "
        "slots (use one KVTIER_PAGE_SIZE for both)",
        who(), region.id, region.page_size, store_->page_size());
  }
  rec.flags.fetch_and(static_cast<uint8_t>(~kPageTouchedDuringMove), std::memory_order_relaxed);
  rec.flags.fetch_or(kPageInFlight, std::memory_order_relaxed);
  ++r->disk_io;
  return r;
}

Status MemfdDevice::FinishSpillLocked(MemfdRegion& r, uint32_t page,
                                      const Result<SpillSlot>& written) {
  Region& region = *r.region;
  PageRecord& rec = region.pages[page];
  const uint8_t flags = rec.flags.fetch_and(
      static_cast<uint8_t>(~(kPageInFlight | kPageTouchedDuringMove)), std::memory_order_relaxed);
  // A copy it had on SSD was stale (the page was written to again).
  DropCopyLocked(r, page);
  if (!written.ok()) {
    // The store counted the error and backs off; the host copy is the page.
    return written.status().Annotate(std::string(who()) + ": spill of region " +
                                     std::to_string(region.id) + " page " + std::to_string(page));
  }
  const SpillSlot slot = written.value();
  if ((flags & kPageTouchedDuringMove) || r.degraded ||
      rec.tier.load(std::memory_order_relaxed) != Tier::kHost) {
    // The engine may have changed the page since it was written: the copy
    // on disk is stale, and the page stays where the fault put it.
    store_->Free(slot.index);
    return Status::Ok();
  }
  const off_t offset = static_cast<off_t>(uint64_t{page} * region.page_size);
  if (fallocate(r.views.memfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, offset,
                static_cast<off_t>(region.page_size)) != 0) {
    const int err = errno;
    store_->Free(slot.index);
    return Status::Errorf(
        "%s: spill of region %u page %u: punching it out of the memfd failed: %s "
        "(the page stays in host memory)",
        who(), region.id, page, strerror(err));
  }
  rec.disk_slot = slot.index;
  rec.checksum = slot.checksum;
  SetTierLocked(r, page, Tier::kDisk);
  return Status::Ok();
}

bool MemfdDevice::CopyKnownCurrent(const PageRecord& rec) {
  const uint8_t flags = rec.flags.load(std::memory_order_relaxed);
  return (flags & kPageDiskCopy) && (flags & kPageUnwritten);
}

bool MemfdDevice::CopyIsCurrent(const Region& region, uint32_t page, const uint8_t* bytes) const {
  const PageRecord& rec = region.pages[page];
  return (rec.flags.load(std::memory_order_relaxed) & kPageDiskCopy) &&
         PageChecksum(bytes, region.page_size) == rec.checksum;
}

void MemfdDevice::DropCopyLocked(MemfdRegion& r, uint32_t page) {
  PageRecord& rec = r.region->pages[page];
  if (!(rec.flags.load(std::memory_order_relaxed) & kPageDiskCopy)) return;
  rec.flags.fetch_and(static_cast<uint8_t>(~(kPageDiskCopy | kPageUnwritten)),
                      std::memory_order_relaxed);
  store_->Free(rec.disk_slot);
}

std::vector<Status> MemfdDevice::PunchRuns(const std::vector<PageOf>& pages) {
  std::vector<Status> out(pages.size());
  for (size_t i = 0; i < pages.size();) {
    const size_t j = RunEnd(pages, i);
    const Region& region = *pages[i].r->region;
    const off_t offset = static_cast<off_t>(uint64_t{pages[i].page} * region.page_size);
    if (fallocate(pages[i].r->views.memfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, offset,
                  static_cast<off_t>((j - i) * region.page_size)) != 0) {
      const Status s = Status::Errorf(
          "region %u pages %u..%zu: punching them out of the memfd failed: %s "
          "(they stay in host memory)",
          region.id, pages[i].page, pages[i].page + (j - i) - 1, strerror(errno));
      Log(0, "%s", s.message().c_str());
      for (size_t k = i; k < j; ++k) out[k] = s;
    }
    i = j;
  }
  return out;
}

void MemfdDevice::LeftForCopyLocked(MemfdRegion& r, uint32_t page) {
  PageRecord& rec = r.region->pages[page];
  rec.flags.fetch_and(static_cast<uint8_t>(~(kPageDiskCopy | kPageUnwritten)),
                      std::memory_order_relaxed);
  store_->Reuse(rec.disk_slot);
  SetTierLocked(r, page, Tier::kDisk);
  Counters::Add(counters_.spill_clean_pages);
}

void MemfdDevice::DroppedZeroPageLocked(MemfdRegion& r, uint32_t page) {
  // With no bytes it is a never-touched page again: the next touch is
  // filled with zeros (MISSING), which is what it held.
  DropCopyLocked(r, page);
  SetTierLocked(r, page, Tier::kUntouched);
  Counters::Add(counters_.zero_pages_dropped);
}

Status MemfdDevice::RestoreLocked(MemfdRegion& r, uint32_t page, std::vector<Evicted>* evicted) {
  Region& region = *r.region;
  PageRecord& rec = region.pages[page];
  const size_t len = region.page_size;
  const uint32_t slot = rec.disk_slot;
  const uint64_t checksum = rec.checksum;
  // In flight: a second fault on the page waits for this restore instead of
  // reading it again, and a Spill or Promote leaves it alone.
  rec.flags.fetch_or(kPageInFlight, std::memory_order_relaxed);
  ++r.disk_io;
  mu_.Unlock();
  AlignedBuffer buffer = scratch_.Take(len);
  if (buffer.data() != nullptr) ReadOrDie(r, page, slot, checksum, buffer.data());
  mu_.Lock();
  Status s = buffer.data() != nullptr
                 ? InstallRestoredLocked(r, page, buffer.data(), evicted)
                 : Status::Errorf("no %zu-byte buffer to restore region %u page %u into", len,
                                  region.id, page);
  rec.flags.fetch_and(static_cast<uint8_t>(~kPageInFlight), std::memory_order_relaxed);
  // A fault that coalesced on it told the pipeline it waits: not any more.
  waiting_.erase(region.PageAddr(page));
  // Faults that coalesced on this restore wait for an install that did not
  // happen: wake them to fault again.
  if (!s.ok()) uffd_.Wake(region.PageAddr(page), len);
  EndDiskIoLocked(r);
  scratch_.Return(std::move(buffer));
  return s;
}

Status MemfdDevice::InstallRestoredLocked(MemfdRegion& r, uint32_t page, const uint8_t* bytes,
                                          std::vector<Evicted>* evicted) {
  Region& region = *r.region;
  PageRecord& rec = region.pages[page];
  const size_t len = region.page_size;
  bool unwritten = false;
  if (r.degraded) {
    // The view is about to be unregistered (DegradeLocked waits for this):
    // the bytes go into the memfd, where the engine will find them.
    memcpy(r.views.alias + uint64_t{page} * len, bytes, len);
  } else {
    if (Status s = MakeRoomLocked(len, evicted); !s.ok()) return s;
    if (Status s = InstallLocked(r, page, 1, bytes, &unwritten); !s.ok()) {
      // Part of it may be installed; the slot still holds all of it.
      return s.Annotate(std::string(who()) + ": restoring region " + std::to_string(region.id) +
                        " page " + std::to_string(page));
    }
  }
  if (r.degraded) {
    store_->Free(rec.disk_slot);
  } else {
    // The copy on SSD stays: until the engine changes the page, it can
    // leave memory again without a write.
    store_->KeepAsCopy(rec.disk_slot);
    rec.flags.fetch_or(kPageDiskCopy, std::memory_order_relaxed);
  }
  SetTierLocked(r, page, r.degraded ? Tier::kHost : Tier::kDevice);
  if (!r.degraded) JudgeInstallLocked(rec, /*ahead=*/false, /*parked=*/false);
  if (unwritten) MapWritableOrMarkLocked(r, page);
  return Status::Ok();
}

void MemfdDevice::MapWritableOrMarkLocked(MemfdRegion& r, uint32_t page) {
  r.region->pages[page].flags.fetch_or(kPageUnwritten, std::memory_order_relaxed);
  MapWritableIfMarkedLocked(r, page);
}

void MemfdDevice::MapWritableIfMarkedLocked(MemfdRegion& r, uint32_t page) {
  Region& region = *r.region;
  const uintptr_t addr = region.PageAddr(page);
  // Write-protected, the engine's write would fault at once: a sleep of an
  // engine thread (and, on a barrier, of the others) for nothing. Writable,
  // the page is hashed when it leaves instead (its copy may be current).
  // Otherwise the mark stays as it is (a write fault since the install may
  // have cleared it: never set here).
  if (write_next_.empty() || write_next_.erase(addr) == 0) return;
  if (uffd_.Unprotect(addr, region.page_size).ok()) {
    region.pages[page].flags.fetch_and(static_cast<uint8_t>(~kPageUnwritten),
                                       std::memory_order_relaxed);
  }
}

Status MemfdDevice::InstallLocked(MemfdRegion& r, uint32_t first, uint32_t count,
                                  const uint8_t* bytes, bool* unwritten) {
  return CopyIn(r.region->PageAddr(first), uint64_t{count} * r.region->page_size, bytes,
                r.protectable, unwritten);
}

Status MemfdDevice::CopyIn(uintptr_t start, size_t len, const uint8_t* bytes, bool protect,
                           bool* unwritten) const {
  *unwritten = false;
  if (!protect) return uffd_.Copy(start, len, bytes);
  return uffd_.CopyProtected(start, len, bytes, unwritten);
}

void MemfdDevice::EndDiskIoLocked(MemfdRegion& r) {
  --r.disk_io;
  disk_io_done_.SignalAll();
}

void MemfdDevice::ReadBackSpilledLocked(MemfdRegion& r) {
  Region& region = *r.region;
  for (uint32_t p = 0; p < region.pages.size(); ++p) {
    PageRecord& rec = region.pages[p];
    if (rec.tier.load(std::memory_order_relaxed) != Tier::kDisk) {
      DropCopyLocked(r, p);  // the region's pages stay in memory from now on
      continue;
    }
    // Rare (an error path), so the read runs under the lock: straight into
    // the memfd through the alias, which is not registered.
    ReadOrDie(r, p, rec.disk_slot, rec.checksum, r.views.alias + uint64_t{p} * region.page_size);
    store_->Free(rec.disk_slot);
    SetTierLocked(r, p, Tier::kHost);
  }
}

void MemfdDevice::ReadOrDie(const MemfdRegion& r, uint32_t page, uint32_t slot, uint64_t checksum,
                            uint8_t* dst) {
  const Region& region = *r.region;
  ReadFailure failure = ReadFailure::kNone;
  Status s = store_->Read(slot, dst, region.page_size, checksum, &failure, {region.id, page});
  if (!s.ok()) StopOnLostPage(*store_, region.id, region.tag, page, s);
}

}  // namespace kvtier
