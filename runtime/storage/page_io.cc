// PageIo, IsAllZero and ScratchPool: see page_io.h.
#include "runtime/storage/page_io.h"

#include <errno.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>

#include "runtime/log.h"

namespace kvtier {

bool IsAllZero(const uint8_t* bytes, size_t len) {
  // Word at a time; pages are page aligned and a multiple of 8 bytes.
  const auto* words = reinterpret_cast<const uint64_t*>(bytes);
  uint64_t any = 0;
  for (size_t i = 0; i < len / sizeof(uint64_t); ++i) {
    any |= words[i];
    if ((i & 511) == 511 && any != 0) return false;  // stop early on data
  }
  return any == 0;
}

void StopOnLostPage(const SpillStore& store, uint32_t region_id, const std::string& tag,
                    uint32_t page, const Status& why) {
  int status = 0;
  if (store.exiting(&status)) {
    // The process is exiting and its spill key is wiped: a thread still
    // running, or an exit handler after kvtier's, needed a spilled page.
    // The exit is given a second to end by itself (its last handlers, the
    // flush of stdio); if it has not, the one waiting for this page is
    // likely the exiting thread, and the process ends now with the status
    // it was exiting with (stdio buffers not yet flushed are lost then).
    Log(1,
        "disk tier: region %u (%s) page %u was needed after the spill key was wiped at exit; "
        "the process ends with status %d",
        region_id, tag.c_str(), page, status);
    struct timespec grace = {1, 0};
    while (nanosleep(&grace, &grace) != 0 && errno == EINTR) {
    }
    _exit(status);
  }
  Log(0,
      "disk tier: stopping the process: region %u (%s) page %u cannot be restored from the %s: %s",
      region_id, tag.c_str(), page, store.file_description().c_str(), why.message().c_str());
  abort();
}

void PageIo::Write(const std::vector<Source>& sources, const WrittenFn& written) {
  if (sources.size() == 1) {
    written(0, store_->Write(sources[0].bytes, sources[0].len, sources[0].place));
    return;
  }
  MutexLock lock(&mu_);
  std::vector<bool> reported(sources.size(), false);
  auto report = [&](const std::vector<SpillCompletion>& done) {
    for (const SpillCompletion& c : done) {
      reported[c.tag] = true;
      written(c.tag, c.status.ok() ? Result<SpillSlot>(c.slot) : Result<SpillSlot>(c.status));
    }
  };
  Status broken = EnsureBatchLocked();
  if (broken.ok()) {
    for (size_t j = 0; j < sources.size(); ++j) {
      batch_->AddWrite(sources[j].bytes, sources[j].len, j, sources[j].place);
    }
    while (broken.ok() && batch_->outstanding() > 0) {
      std::vector<SpillCompletion> done;
      broken = batch_->Wait(1, &done);
      report(done);  // what completed, even when the queue broke
    }
    // A broken queue is dropped (its writes that may still land keep their
    // slots); the next group sets up a new one.
    if (!broken.ok()) {
      (void)batch_->Abandon();
      batch_.reset();
    }
  }
  const Status missing = broken.ok() ? Status::Error("the spill write did not complete") : broken;
  for (size_t j = 0; j < sources.size(); ++j) {
    if (!reported[j]) written(j, missing);
  }
}

void PageIo::ReadRuns(size_t count, const std::function<RunTarget(size_t)>& next, size_t window,
                      const RunReadFn& read, const MovedFn& moved) {
  const size_t page = store_->page_size();
  std::vector<RunTarget> runs;
  runs.reserve(count);
  const auto page_by_page = [&](size_t i) {
    const RunTarget& r = runs[i];
    for (uint32_t k = 0; k < r.pages; ++k) {
      read(i, k,
           store_->Read(r.slot + k, r.dst + k * page, page, r.checksums[k], nullptr,
                        r.first.Next(k)));
    }
  };
  if (count == 0) return;
  if (count == 1) {
    runs.push_back(next(0));
    // One page: through the store's own lanes, without the pipeline's lock
    // (restores of single pages on other threads go at once).
    if (runs[0].pages == 1) return page_by_page(0);
  }
  MutexLock lock(&mu_);
  Status broken = EnsureBatchLocked();
  SpillBatch* const batch = broken.ok() ? batch_.get() : nullptr;  // ours while mu_ is held
  std::vector<bool> reported(count, false);
  size_t added = 0;         // runs given to the batch
  size_t queued_bytes = 0;  // of them, queued or in flight
  const auto queue_more = [&] {
    while (added < count && (queued_bytes < window || batch->outstanding() == 0)) {
      const size_t i = added++;
      if (i == runs.size()) runs.push_back(next(i));
      const RunTarget& r = runs[i];
      queued_bytes += r.pages * page;
      if (r.pages == 1) {
        batch->AddRead(r.slot, r.dst, page, r.checksums[0], i, r.first);
      } else {
        batch->AddReadRun(r.slot, r.pages, r.dst, r.checksums, i, r.first);
      }
    }
  };
  if (broken.ok()) {
    queue_more();
    while (broken.ok() && batch->outstanding() > 0) {
      std::vector<SpillCompletion> done;
      broken = batch->Wait(1, &done);
      for (const SpillCompletion& c : done) {
        const size_t i = c.tag;
        reported[i] = true;
        queued_bytes -= runs[i].pages * page;
        if (!c.status.ok()) {
          page_by_page(i);
          continue;
        }
        for (uint32_t k = 0; k < runs[i].pages; ++k) read(i, k, Status::Ok());
      }
      if (broken.ok()) queue_more();
    }
    if (!broken.ok()) {
      // Reads that may still land keep their buffers; theirs are read again
      // into new ones.
      for (uint64_t i : batch_->Abandon()) runs[i].dst = moved(i);
      batch_.reset();
    }
  }
  // Without a queue (it could not be made, or it broke), what it did not
  // complete: one page at a time.
  for (size_t i = 0; i < count; ++i) {
    if (i == runs.size()) runs.push_back(next(i));
    if (!reported[i]) page_by_page(i);
  }
}

Status PageIo::EnsureBatchLocked() {
  if (batch_ != nullptr) return Status::Ok();
  Result<std::unique_ptr<SpillBatch>> made = store_->NewBatch();
  if (!made.ok()) return made.status();
  batch_ = std::move(made).value();
  return Status::Ok();
}

void PageIo::Reset() {
  MutexLock lock(&mu_);
  batch_.reset();
}

AlignedBuffer ScratchPool::Take(size_t bytes) {
  {
    MutexLock lock(&mu_);
    size_t best = free_.size();  // the smallest that holds `bytes`
    for (size_t i = 0; i < free_.size(); ++i) {
      if (free_[i].size() < bytes) continue;
      if (best == free_.size() || free_[i].size() < free_[best].size()) best = i;
      if (free_[best].size() == bytes) break;
    }
    if (best < free_.size()) {
      AlignedBuffer b = std::move(free_[best]);
      free_.erase(free_.begin() + static_cast<ptrdiff_t>(best));
      return b;
    }
  }
  Result<AlignedBuffer> made = AlignedBuffer::Allocate(bytes);
  if (!made.ok()) {
    static std::atomic<bool> warned{false};
    WarnOnce(&warned, "%s: %s", owner_, made.status().message().c_str());
    return AlignedBuffer();
  }
  return std::move(made).value();
}

void ScratchPool::Return(AlignedBuffer buffer) {
  if (buffer.data() == nullptr) return;
  MutexLock lock(&mu_);
  if (free_.size() < keep_) free_.push_back(std::move(buffer));
}

void ScratchPool::Fill(size_t count, size_t bytes) {
  count = std::min(count, keep_);
  while (kept() < count) {
    // Made outside the lock: filling new memory takes a while.
    Result<AlignedBuffer> made = AlignedBuffer::Allocate(bytes);
    if (!made.ok()) return;
    MutexLock lock(&mu_);
    if (free_.size() >= count) return;
    free_.push_back(std::move(made).value());
  }
}

size_t ScratchPool::kept() const {
  MutexLock lock(&mu_);
  return free_.size();
}

}  // namespace kvtier
