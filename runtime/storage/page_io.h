// What every backend with a disk tier needs around the SpillStore: spill
// writes and restore reads of many pages at once (PageIo), the test for a
// page of zeros, and private page buffers for restores (ScratchPool), so the
// engine never sees bytes before they are verified.
// Thread-safety: PageIo's methods may be called from any thread (callers
// take turns on the one pipeline); ScratchPool is safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/mutex.h"
#include "runtime/status.h"
#include "runtime/storage/env.h"
#include "runtime/storage/spill_batch.h"
#include "runtime/storage/spill_store.h"

namespace kvtier {

// The most one restore read takes (one page at least): neighbouring slots
// of a region's neighbouring pages share a read up to this, in the
// simulated GPU's and host backend's restore pipeline and in the CUDA
// tier's. Not larger: this project's virtual disk reads slower the larger
// each read and, for large reads, the more in flight. fio (io_uring,
// direct) read 1.9-2.0 GB/s in requests of 64 or 128 KiB 32 to 128 deep,
// 1.75 in 1 MiB requests 8 deep, 1.6 16 deep, 1.4 32 deep; with reads of
// up to 1 MiB (16 or 32 MiB in flight) the restores of `kvtier-bench
// spill` moved 1.4-1.6 GB/s, with 128 KiB (4-8 MiB in flight) 1.8-2.0. An
// NVMe drive is at its speed with a few MiB in flight of either.
constexpr size_t kMaxRestoreReadBytes = size_t{128} << 10;

// True when the `len` bytes (a multiple of 8, 8-aligned) are all zero.
bool IsAllZero(const uint8_t* bytes, size_t len);

// A spilled page could not be read back (the store tried twice): its only
// copy is gone or corrupt and the engine would run on with wrong KV, so
// this says which page and why, and stops the process.
[[noreturn]] void StopOnLostPage(const SpillStore& store, uint32_t region_id,
                                 const std::string& tag, uint32_t page, const Status& why);

class PageIo {
 public:
  explicit PageIo(SpillStore* store) : store_(store) {}

  struct Source {
    const uint8_t* bytes;
    size_t len;
    PagePlace place;  // bound into the page's seal
  };
  // Called once per source, with its index, as its write completes (with
  // the writer's lock held: it may take the caller's locks, never the other
  // way round).
  using WrittenFn = std::function<void(size_t index, const Result<SpillSlot>& slot)>;
  // Writes the pages: one through the store's synchronous lanes (callers on
  // other threads spill in parallel), more through the writer's pipelined
  // batch. Every source is reported, failed ones with why.
  void Write(const std::vector<Source>& sources, const WrittenFn& written);
  // Pages of one region in consecutive slots, read with one request.
  struct RunTarget {
    uint32_t slot;              // the first page's; page k is in slot + k
    uint32_t pages;             // 1 or more
    const uint64_t* checksums;  // one per page
    uint8_t* dst;               // private, page aligned, pages x the store's page size
    PagePlace first;            // page k was written as first.Next(k)
  };
  // Called once per page of each run as its read completes, with the run's
  // index and the page's within it: ok once the bytes are in dst and
  // verified (the store retried a bad read once), else why not.
  using RunReadFn = std::function<void(size_t run, uint32_t page, const Status& status)>;
  // Reads `count` runs, each one request (neighbouring slots come back in
  // one read, not one read a page): run i is asked of
  // next(i) when it is queued, in order, while under `window` bytes are
  // queued or in flight, so its buffer need exist only from then on and
  // the disk always has a window's worth to read. A run that fails (the
  // store would bounce it, a page of it stays wrong after its retry, or
  // the queue broke) is read again a page at a time, so a failure names
  // the page that is lost. A single page goes through the store's own
  // lanes (callers on other threads read in parallel).
  // A run whose read may still land after its queue broke (the queue was
  // given up with it in flight: SpillBatch::Abandon) is read again into
  // the buffer moved(run) returns (same size); the caller never uses the
  // first one again (KeepForever). moved may return null only to stop.
  using MovedFn = std::function<uint8_t*(size_t run)>;
  void ReadRuns(size_t count, const std::function<RunTarget(size_t)>& next, size_t window,
                const RunReadFn& read, const MovedFn& moved);
  // Drops the pipeline (before the store is destroyed).
  void Reset();

 private:
  Status EnsureBatchLocked() REQUIRES(mu_);

  SpillStore* const store_;
  Mutex mu_;
  std::unique_ptr<SpillBatch> batch_ GUARDED_BY(mu_);  // made on first use
};

class ScratchPool {
 public:
  // Keeps up to `keep` buffers for reuse; `owner` prefixes the one warning
  // an allocation failure prints ("simulated GPU", "CUDA backend").
  ScratchPool(size_t keep, const char* owner) : keep_(keep), owner_(owner) {}
  // A page-aligned buffer of at least `bytes` (the smallest kept one that
  // holds them); empty (data() null) when memory is short.
  AlignedBuffer Take(size_t bytes);
  void Return(AlignedBuffer buffer);
  // Makes buffers of `bytes` until it keeps `count` (at most `keep`), so
  // that the first restore takes them rather than filling new memory on its
  // way; stops at the first that cannot be had (Take makes it later).
  void Fill(size_t count, size_t bytes);
  size_t kept() const;  // buffers kept for reuse (tests)

 private:
  const size_t keep_;
  const char* const owner_;
  mutable Mutex mu_;
  std::vector<AlignedBuffer> free_ GUARDED_BY(mu_);
};

}  // namespace kvtier
