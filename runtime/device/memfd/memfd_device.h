// MemfdDevice: a device of real bytes and real faults on memfds and
// userfaultfd, no GPU. Two configurations of it run (bootstrap.h's
// DataDeviceShape): the simulated GPU (KVTIER_BACKEND=sim, Backend::kSim), whose
// "device" tier stands for GPU memory, and the host backend
// (KVTIER_BACKEND=host, Backend::kHost), whose "device" tier is a CPU engine's
// resident KV and whose host tier is staging on the way to SSD.
//
// Each region is a memfd of whole pages. The engine gets a MAP_SHARED view of
// it, aligned to the page size and registered with the device's userfaultfd;
// kvtier keeps a second, unregistered alias view. "Device-resident" means the
// engine view's PTEs are present; the memfd always holds the bytes. Demote
// zaps the PTEs (MADV_DONTNEED), so the next touch raises a MINOR fault — the
// simulated GPU page fault — which a handler thread resolves with
// UFFDIO_CONTINUE after making room. A never-touched page has no bytes: its
// first touch raises MISSING and is filled with zeros. When a fault or a
// Promote finds the device full, the simulated driver evicts the least
// recently migrated page (as UVM does; accesses to resident pages are
// invisible to it). Residency never exceeds capacity_bytes. A page counts as
// whole-page bytes even when the region's last page is partial: the memfd and
// the view are whole pages.
//
// Disk tier (MemfdDeviceConfig::store): Spill(kHost page) marks the page in
// flight under the lock, writes its bytes from the alias to the store outside
// it (zero-copy: the alias is page aligned), then under the lock punches the
// page out of the memfd (fallocate PUNCH_HOLE) => kDisk, with the slot and
// checksum in the PageRecord. A page that reads as all zeros is punched out
// and written nowhere => kUntouched: its next touch is filled with zeros, as
// a never-touched page's is (counted as zero_pages_dropped). A touch meanwhile is a MINOR fault
// like any on a host page; it sets kPageTouchedDuringMove and the spill, finding it, frees the slot
// and keeps the page where the fault put it. A failed write leaves the page on the host (the store
// counts it and backs off). The next touch of a spilled page raises MISSING: the fault thread marks
// it in flight, reads it into a private page-aligned buffer outside the lock (the store verifies
// the checksum and retries once), then under the lock makes room and installs it with UFFDIO_COPY.
// Another fault on that page meanwhile is dropped: the install wakes every thread waiting on the
// page (so one read per restore); restores of different pages read in parallel. A read that fails
// for good stops the process (never hand corrupted KV to the engine). Promote of a spilled page
// restores it the same way. The store counts spilled_*, restored_* and disk_used_bytes; the device
// moves host_used_bytes.
//
// Fork: the child inherits the views but not the userfaultfd registration
// (no UFFD_FEATURE_EVENT_FORK) nor the handler threads. The child must call
// AfterForkInChild(); the device then refuses every operation, and its
// destructor frees nothing (a parent thread may have been mid-change when
// fork copied the memory; exit or exec reclaims it). On the simulated GPU
// the child's touches then map the shared memfd pages directly (it sees and
// shares the parent's bytes; spilled pages read as zeros): a CUDA program's
// child does not use its parent's device memory. The host backend (config
// range set) gives the child what fork gives a heap: BeforeFork takes the
// transition lock, so no page changes tier and no spill slot is freed or
// reused; in the child, AfterForkInChild copies every block into private
// anonymous memory at the same address (resident pages from the alias,
// spilled pages read from the spill file and verified), adopts it in the
// range as a plain block, drops the child's references to the memfds and the
// spill file, and tells the parent, whose AfterForkInParent waits for that
// before it lets go of the lock. The copy is eager, not copy-on-write: the
// child holds the blocks' bytes in its own memory, and a fork costs the time
// to copy them. Engine threads of the parent that write a block while the
// child copies it may be seen by the child (without kvtier the child sees
// the bytes of the instant of fork: for writes the program orders before its
// fork, the two agree).
//
// Thread-safety: all public methods are safe from any thread. One
// device-wide transition mutex serialises every residency change (faults,
// Demote, Promote, Spill, DestroyRegion) and guards the resident list; a
// page's transition (at most the evictions it needs plus one install) is the
// longest hold. Disk I/O never runs under it (except when a region is
// degraded after an error: its spilled pages are read back under it).
// DeviceEvents are called with no lock held.
#pragma once

#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "runtime/counters.h"
#include "runtime/device/device.h"
#include "runtime/device/memfd/uffd.h"
#include "runtime/device/resident_list.h"
#include "runtime/mutex.h"
#include "runtime/start_step.h"
#include "runtime/storage/page_io.h"
#include "runtime/storage/spill_batch.h"
#include "runtime/storage/spill_store.h"

struct uffd_msg;

namespace kvtier {
class VaRange;
}

namespace kvtier {

struct MemfdDeviceConfig {
  uint64_t capacity_bytes = 0;     // most bytes of tiered pages resident at once
  int fault_threads = 1;           // threads resolving faults (1..16)
  DeviceEvents* events = nullptr;  // may be null (no callbacks)
  Counters* counters = nullptr;    // may be null (the device keeps its own)
  // Fill untouched pages with UFFDIO_COPY from a zero buffer even where
  // UFFDIO_ZEROPAGE works (the path the disk tier's restore takes; tests).
  bool copy_fill = false;
  // The disk tier; null: none (Spill fails). Must outlive the device, and
  // should share `counters` (it keeps the disk gauges).
  SpillStore* store = nullptr;
  // A test seam: asked before each fallible step of Create (start_step.h).
  StartStepCheck check_step;
  // A test seam: called on the installing thread once the restore pipeline
  // has copied a run of pages in (mapped, write-protected where it can be)
  // without the device lock, before it books them as resident.
  std::function<void(uintptr_t start, size_t len)> after_unlocked_copy;
  // kSim, or kHost when the device is the host backend (KVTIER_BACKEND=host:
  // "device" is the engine's resident memory).
  Backend backend = Backend::kSim;
  // Where the engine views go; null: anywhere (the host backend places them
  // in the process's VaRange, for its free() hook).
  VaRange* range = nullptr;
  // The most bytes the host tier may hold before a fault waits for the
  // staging's drain to write pages to SSD (0: no limit, no drain). The host
  // backend's staging, so that device + host stay within KVTIER_HOST_BUDGET.
  uint64_t host_limit_bytes = 0;
  // Never-touched pages a first touch populates after its own (0: none, as
  // UVM's faults on the simulated GPU; the host backend sets it: a CPU
  // engine writes new KV, and clears its buffers, in order).
  uint32_t fill_ahead_pages = 0;
  // With a disk tier: while idle, write copies of the oldest resident pages
  // (the next evictions) ahead, so that they leave without a write.
  bool copy_ahead = false;
  // Map pages that have a current copy on SSD write-protected (where the
  // kernel can), so that one that leaves again unwritten needs no hash to
  // say so (kPageUnwritten). Off: every such page is hashed as it leaves.
  bool write_protect = true;
  // Park one page in `park_every` of those the restore pipeline reads
  // ahead of any touch: into the memfd, unmapped until the engine's first
  // touch (a MINOR fault) maps it, so that whether a page read ahead was
  // touched before it left is known for that sample (readahead_used_pages
  // and readahead_vain_pages count each parked page as park_every pages).
  // 1: every one (exact counts); 0: none, all mapped at once as the pages
  // a thread waits on are. Each parked page's touch costs a MINOR fault's
  // round trip through a fault thread: parking all of them (a build with
  // 1 here) cost returning sessions 10-20% of their TTFT in
  // bench-llama-host --matrix runs of mha-4L-4s and gqa-8L-6s.
  uint32_t park_every = 8;
  // The longest a fault or an install waits for room in a full staging
  // (tests set it long, so that a wait that runs out is unmistakable).
  std::chrono::milliseconds staging_wait{50};
};

// Per-region backend state (Region::backend points here).
struct MemfdRegion {
  class MemfdDevice* device = nullptr;
  // Held until DestroyRegion: while the view is mapped and registered, a
  // fault may need the page records, whoever else dropped the region.
  RegionPtr region;
  ShmViews views;
  std::unique_ptr<ResidentLink<MemfdRegion>[]> links;  // one per page
  bool zeropage = true;      // UFFDIO_ZEROPAGE works here (else COPY from zeros)
  bool protectable = false;  // registered for WP faults (UFFDIO_WRITEPROTECT works)
  // Guarded by the device's mutex:
  bool degraded = false;   // untiered after an error
  bool releasing = false;  // DestroyRegion waits for its disk I/O to end
  int disk_io = 0;         // spills and restores of its pages reading or writing now
};

class MemfdDevice final : public Device {
 public:
  static Result<std::unique_ptr<MemfdDevice>> Create(const MemfdDeviceConfig& config);
  ~MemfdDevice() override;
  MemfdDevice(const MemfdDevice&) = delete;
  MemfdDevice& operator=(const MemfdDevice&) = delete;

  Backend backend() const override { return backend_; }
  // What its messages call it: "simulated GPU" or "host backend".
  static const char* Who(Backend backend) {
    return backend == Backend::kHost ? "host backend" : "simulated GPU";
  }
  const char* who() const { return Who(backend_); }
  Result<RegionPtr> CreateRegion(RegionId id, size_t bytes, size_t page_size,
                                 std::string tag) override;
  // Waits for disk I/O on the region's pages to end; frees their spill slots.
  void DestroyRegion(Region& region) override;
  Status Demote(Region& region, uint32_t page) override;
  // Demote for each page, their PTEs zapped in runs of neighbours (one TLB
  // shootdown per run).
  void DemotePages(std::span<const PageRef> pages, std::span<Status> results) override;
  // From the disk tier too (read back and verified; waits for a restore of
  // the page that a fault started).
  Status Promote(Region& region, uint32_t page) override;
  // Writes a kHost page to the store and drops it from memory (see top).
  // Ok and a no-op for a page that is not on the host (a fault may have
  // brought it back since the policy chose it) or is already moving; an
  // error when the write failed (the page stays on the host) or there is no
  // disk tier.
  Status Spill(Region& region, uint32_t page) override;
  // Spill for each page, with up to the store's queue depth of writes in
  // flight. Concurrent callers take turns (one pipeline per device).
  void SpillPages(std::span<const PageRef> pages, std::span<Status> results) override;
  bool has_disk_tier() const override { return store_ != nullptr; }
  uint64_t resident_bytes() const override;
  uint64_t capacity_bytes() const override { return capacity(); }
  bool resident_in_host_memory() const override { return true; }
  // The host backend's budget that follows the memory wall: the mapped
  // share and the staging limit change together. Refused (false) by a device
  // started without a staging limit (the simulated GPU, no disk tier).
  bool SetBudget(uint64_t capacity_bytes, uint64_t host_limit_bytes) override;

  // The unregistered view of a region's bytes (for the disk tier and tests).
  // Only touch pages that are on the device or the host.
  uint8_t* AliasOf(const Region& region) const;
  // Whether only user-mode faults are caught (see UserFaultFd).
  bool user_mode_only() const { return uffd_.user_mode_only(); }
  // Faults on a page whose restore another thread had already started
  // (resolved by that restore's install, without a read of their own).
  uint64_t coalesced_faults() const { return coalesced_faults_.load(); }
  // Write-protect faults: first writes to pages mapped write-protected
  // since their last copy to or from SSD (each makes that copy stale).
  uint64_t write_faults() const { return write_faults_.load(); }
  // Whether the restore pipeline waits for work with nothing under way
  // (for tests that must act before it wakes).
  bool RestorerIdle() const;

  // The fork steps (see top).
  void BeforeFork() override;
  void AfterForkInParent() override;
  void AfterForkInChild() override;

 private:
  using Clock = std::chrono::steady_clock;
  struct Evicted {
    RegionPtr region;  // kept alive for the callback
    uint32_t page;
  };

  MemfdDevice(const MemfdDeviceConfig& config, UserFaultFd uffd, int stop_fd);
  Status StartThreads(int count, const StartStepCheck& check);
  void StopThreads();
  // A fault thread's epoll set: the userfaultfd (EPOLLEXCLUSIVE) and stop_fd_.
  Result<int> MakeFaultWaitSet();
  void FaultLoop(int ep);  // closes ep when it ends
  void HandleFault(const uffd_msg& msg, Clock::time_point read_at);
  // With a host limit: while the host tier has no room for `bytes` more
  // (at most its whole limit) and the disk tier takes writes, waits (at
  // most MemfdDeviceConfig::staging_wait) for the drain's writes to make room; a fault's or an
  // install's wait (`engine_waits`) is counted in staging_waits. Called
  // with no lock held.
  void WaitForStagingRoom(uint64_t bytes, bool engine_waits);
  // The staging's fault reserve: room below its limit that the policy
  // thread's moves keep free (WaitForDrain waits for it), so that
  // a fault's eviction finds room at once. Two of the largest region pages
  // a fault thread, at most a quarter of the limit (none where a quarter
  // holds no page).
  uint64_t FaultReserve() const;
  // The staging's drain (memfd_fault_loop.cc), with a host limit and a disk
  // tier: a thread that writes the oldest staged pages to SSD as soon as
  // the staging holds more than DrainTarget(), so that the room a fault or
  // an install needs is made ahead, not by the policy's next tick.
  Status StartDrainer(const StartStepCheck& check);
  // Starts `body` on `*thread` with asynchronous signals blocked, as the
  // fault threads (`what` names it in the error).
  static Status StartQuietThread(const char* what, std::function<void()> body,
                                 std::unique_ptr<std::thread>* thread);
  void DrainLoop();
  // The limit less the fault reserve (at least one page of the largest
  // size kept free).
  uint64_t DrainTarget() const;
  bool StagingOverTargetLocked() const REQUIRES(mu_);

  // Every *Locked method requires mu_; RestoreLocked and DegradeLocked
  // release it for a while and hold it again when they return.
  Status Usable() const;
  Result<MemfdRegion*> FindLocked(Region& region, uint32_t page) const REQUIRES(mu_);
  MemfdRegion* FindByAddressLocked(uintptr_t addr) const REQUIRES(mu_);
  // Brings a kHost or kUntouched page to the device (evicting as needed).
  Status BringInLocked(MemfdRegion& r, uint32_t page, std::vector<Evicted>* evicted) REQUIRES(mu_);
  // After a first touch of `first - 1`: populates the never-touched pages
  // from `first` on (at most fill_ahead_, up to the first page that is
  // not); returns how many.
  uint32_t FillAheadLocked(MemfdRegion& r, uint32_t first, std::vector<Evicted>* evicted)
      REQUIRES(mu_);
  // Evicts least recently migrated pages until `bytes` more fit.
  Status MakeRoomLocked(uint64_t bytes, std::vector<Evicted>* evicted) REQUIRES(mu_);
  // Installs zeros for a never-touched page (MISSING).
  Status FillUntouchedLocked(MemfdRegion& r, uint32_t page) REQUIRES(mu_);
  Status ZapLocked(MemfdRegion& r, uint32_t page) REQUIRES(mu_);
  struct PageOf {
    MemfdRegion* r;
    uint32_t page;
  };
  // By region, then page: neighbours side by side.
  static bool PageOrder(const PageOf& a, const PageOf& b);
  // The end of the run of neighbours that starts at pages[i] (sorted).
  static size_t RunEnd(const std::vector<PageOf>& pages, size_t i);
  // Zaps the PTEs of `pages` (sorted here), one madvise per run of
  // neighbours.
  Status ZapRunsLocked(std::vector<PageOf>& pages) REQUIRES(mu_);
  // Books pages just zapped off the device (sorted): to the host tier; with
  // the host backend straight to SSD if their copy there is current (or
  // nowhere, if they are zeros), since its host tier only stages pages for
  // SSD. Those are punched out of the memfd here, or, given `punch`, booked
  // and marked in flight and appended for the caller's PunchLeftPages.
  void LeaveDeviceLocked(const std::vector<PageOf>& pages, std::vector<PageOf>* punch = nullptr)
      REQUIRES(mu_);
  // Punches pages LeaveDeviceLocked appended (sorted) with the lock
  // released, then ends their flight and wakes threads that touched them.
  void PunchLeftPages(const std::vector<PageOf>& pages) EXCLUDES(mu_);
  // The one place a page's tier changes: record, resident list, staged list
  // and counters.
  void SetTierLocked(MemfdRegion& r, uint32_t page, Tier to) REQUIRES(mu_);
  // Puts a host page at the newest end of staged_; takes one off it if it
  // is there.
  void Stage(MemfdRegion& r, uint32_t page) REQUIRES(mu_);
  void Unstage(MemfdRegion& r, uint32_t page) REQUIRES(mu_);
  // Stops tiering a region whose fault could not be resolved, so the engine
  // thread waiting on it runs on instead of hanging. Waits for the region's
  // disk I/O and reads its spilled pages back into the memfd first.
  void DegradeLocked(MemfdRegion& r, const Status& why) REQUIRES(mu_);
  void ReleaseRegionLocked(MemfdRegion* r) REQUIRES(mu_);
  void Report(const std::vector<Evicted>& evicted);
  // After the policy thread's moves: while they keep the staging in the
  // faults' reserve, waits for the drain to write it out of it (the drain
  // alone writes staged pages: two writers would write more than the
  // staging needs). Called with no lock held.
  void WaitForDrain();

  // Disk tier (memfd_disk_tier.cc).
  // Restores a kDisk page that is not in flight to the device: marks it,
  // reads it with the lock released, installs it. On an error the page
  // stays on disk and every thread waiting on it is woken to fault again.
  Status RestoreLocked(MemfdRegion& r, uint32_t page, std::vector<Evicted>* evicted) REQUIRES(mu_);
  // Installs restored bytes (or, in a degraded region, copies them into the
  // memfd) and keeps the slot as its copy.
  Status InstallRestoredLocked(MemfdRegion& r, uint32_t page, const uint8_t* bytes,
                               std::vector<Evicted>* evicted) REQUIRES(mu_);
  // For a page just installed write-protected: maps it writable when the
  // engine is about to write it (marked in write_next_), else marks it
  // kPageUnwritten.
  void MapWritableOrMarkLocked(MemfdRegion& r, uint32_t page) REQUIRES(mu_);
  // For a page marked kPageUnwritten before it was installed
  // write-protected: maps it writable and clears the mark when the engine
  // is about to write it (marked in write_next_).
  void MapWritableIfMarkedLocked(MemfdRegion& r, uint32_t page) REQUIRES(mu_);
  // Maps `count` pages from `first` with the verified `bytes` read back
  // from SSD: write-protected where the region is protectable, and then
  // *unwritten says whether all of them are (they may carry kPageUnwritten).
  Status InstallLocked(MemfdRegion& r, uint32_t first, uint32_t count, const uint8_t* bytes,
                       bool* unwritten) REQUIRES(mu_);
  // The copy InstallLocked makes, of `len` bytes at `start`; under the lock
  // or, for pages in flight whose room is taken, without it.
  Status CopyIn(uintptr_t start, size_t len, const uint8_t* bytes, bool protect,
                bool* unwritten) const;
  // The pipeline's install of `count` pages from `first`: each run of
  // `parked` pages is written into the memfd and left unmapped, the others
  // are mapped by CopyIn (*unwritten: all of those write-protected).
  Status InstallRun(MemfdRegion& r, uint32_t first, uint32_t count, const uint8_t* bytes,
                    const std::vector<bool>& parked, bool protect, bool* unwritten) const;
  // Marks a kHost page in flight for a spill. nullptr: nothing to do (not
  // on the host, or already moving).
  Result<MemfdRegion*> BeginSpillLocked(Region& region, uint32_t page) REQUIRES(mu_);
  Status FinishSpillLocked(MemfdRegion& r, uint32_t page, const Result<SpillSlot>& written)
      REQUIRES(mu_);
  // Pages marked by BeginSpillLocked and not yet hashed, outside the lock:
  // pages of zeros and pages whose kept copy is current leave memory
  // without a write (unless a touch came meanwhile); the others are
  // returned, to be written. A punch that fails sets the page's result.
  struct Leaving {
    MemfdRegion* r;
    uint32_t page;
    size_t index;  // into the caller's results
  };
  std::vector<Leaving> LeaveUnwritten(const std::vector<Leaving>& jobs, std::span<Status> results);
  // Punches `pages` (sorted) out of the memfd, one fallocate per run of
  // neighbours; a page's status says whether it is out. The regions must
  // stay (the lock held, or their disk_io counted).
  static std::vector<Status> PunchRuns(const std::vector<PageOf>& pages);
  // Books a page of zeros punched out of the memfd: it becomes kUntouched.
  void DroppedZeroPageLocked(MemfdRegion& r, uint32_t page) REQUIRES(mu_);
  // Whether the page (its `bytes`, which must not change meanwhile) still
  // matches the copy on SSD it kept when it was restored (kPageDiskCopy).
  bool CopyIsCurrent(const Region& region, uint32_t page, const uint8_t* bytes) const;
  // Whether the page has a kept copy on SSD and was not written since it
  // was made (kPageUnwritten): it leaves without a hash or a write.
  static bool CopyKnownCurrent(const PageRecord& rec);
  // A write-protect fault: the page's copy is no longer known current; the
  // protection is lifted and the writer runs on.
  void HandleWriteFault(uintptr_t addr);
  // Frees the page's kept copy, if it has one (the page changed, or leaves
  // the disk tier's care).
  void DropCopyLocked(MemfdRegion& r, uint32_t page) REQUIRES(mu_);
  // Books a page whose kept copy is current, punched out of the memfd: on
  // the disk tier without a write, its copy its only one again.
  void LeftForCopyLocked(MemfdRegion& r, uint32_t page) REQUIRES(mu_);
  void EndDiskIoLocked(MemfdRegion& r) REQUIRES(mu_);
  // Reads every spilled page of a region being degraded back into its memfd.
  void ReadBackSpilledLocked(MemfdRegion& r) REQUIRES(mu_);
  // Reads a spilled page into dst; stops the process if it cannot.
  void ReadOrDie(const MemfdRegion& r, uint32_t page, uint32_t slot, uint64_t checksum,
                 uint8_t* dst);

  // The restore pipeline (memfd_restore.cc, see top).
  struct RestoreJob {
    MemfdRegion* r;
    uint32_t page;
    // A read of a spilled page (marked in flight); else a page in host
    // memory to map back (no I/O; skipped if it has moved meanwhile).
    bool read = true;
    // Queued one stride or more from where the engine faulted (another
    // layer's): read with little in flight, so that a fault's read never
    // waits behind much of it.
    bool later = false;
  };
  // Where the engine reads a region's spilled pages one after another: the
  // pages from its latest fault on are queued `window` ahead.
  struct ReadStream {
    const MemfdRegion* r = nullptr;
    uint32_t start = 0;               // its first fault's page
    uint32_t next = 0;                // one past the last page it queued
    uint32_t window = 0;              // pages queued past its latest fault
    uint64_t used = 0;                // stream_clock_ at its latest fault
    uint32_t lo = 0, hi = 0;          // the pages it faulted on span [lo, hi)
    uint32_t rep_lo = 0, rep_hi = 0;  // the span queued at every stride so far
    bool replicating = false;         // [lo, hi) is partly queued (the ahead limit cut it)
    // The page of its latest write fault (UINT32_MAX: none): the engine
    // appends there, and at each stride from it (the same cells in the
    // other layers) when it gets there.
    uint32_t write_page = UINT32_MAX;
  };
  // The distance between equal parts of the KV cache (one layer's K and the
  // next's, or V): learned from where faults start (see memfd_restore.cc).
  struct StrideGuess {
    uintptr_t starts[3] = {0, 0, 0};  // the latest fault addresses that began a run
    uintptr_t last = 0;               // the latest fault address
    struct Vote {
      uintptr_t distance = 0;
      uint32_t count = 0;
    };
    Vote votes[8];
    uintptr_t stride = 0;  // 0: not known
  };
  // Every fault tells the stride guess where the engine is.
  void NoteFaultLocked(uintptr_t addr, size_t page_size) REQUIRES(mu_);
  // Queues, behind what is queued, the span a stream faulted on at each
  // stride from it (the layers to come first): the same session's blocks
  // in the other layers.
  void ReplicateLocked(ReadStream& stream) REQUIRES(mu_);
  // Appends a job for `page` if it is to come back: a spilled page not in
  // flight (marked now), or a page in host memory. False if neither.
  bool TakeForRestoreLocked(MemfdRegion& r, uint32_t page, std::vector<RestoreJob>* out)
      REQUIRES(mu_);
  static constexpr size_t kMaxStreams = 8;
  // PageRecord::backend: read ahead of any touch (kept until the next
  // install), parked (read ahead and not yet touched), and the install
  // clock at its install above them.
  static constexpr uint32_t kReadAhead = 1, kParkedAhead = 2, kClockShift = 2;
  // Marks a page the engine is about to write (write_next_), at most
  // kMaxWriteNext of them.
  void MarkWriteNextLocked(uintptr_t addr) REQUIRES(mu_);
  static constexpr size_t kMaxWriteNext = 4096;
  Status StartRestorer(const StartStepCheck& check);
  void RestoreLoop();
  // An engine thread waits on spilled page `page` of `r` (it faulted at
  // `since`): queues its read at the front, with the pages its stream reads
  // next; a page queued already moves to the front with them. With
  // `read_here` the fault thread reads `page` itself: only what follows it
  // is queued. `write`: the fault is a write (the engine appends there):
  // the page, and its replicas at the stride, are marked in write_next_.
  void QueueRestoreLocked(MemfdRegion& r, uint32_t page, Clock::time_point since, bool read_here,
                          bool write = false) REQUIRES(mu_);
  // `fresh`: the fault starts a new stream.
  ReadStream& StreamForLocked(const MemfdRegion& r, uint32_t page, bool* fresh) REQUIRES(mu_);
  // A read of `page` the pipeline has queued but cannot start soon (it has
  // as much started as it may, or the device is too small for that much):
  // taken out of the queue, for a fault thread to read it itself. False if
  // there is none, or the pipeline will start it.
  bool TakeBackQueuedLocked(MemfdRegion& r, uint32_t page) REQUIRES(mu_);
  // Drops the queued (not yet started) restores of `r` (null: of every
  // region); their pages stay on disk and their waiters fault again.
  void CancelRestoresLocked(const MemfdRegion* r) REQUIRES(mu_);
  // Installs pages [first, first + count) of `r`, which the pipeline read
  // and verified into `bytes` (or leaves them on disk in a region being
  // destroyed); counts a page a thread waited on as a fault. False when the
  // install failed (the region is then to be degraded).
  bool InstallRunFromPipeline(MemfdRegion& r, uint32_t first, uint32_t count, const uint8_t* bytes);
  // One part of it (at most half the staging), once the staging is not full.
  bool InstallPartFromPipeline(MemfdRegion& r, uint32_t first, uint32_t count,
                               const uint8_t* bytes);
  // Ends a copy ahead: `page` keeps it if it is still in memory and has no
  // copy (else the slot is freed).
  void FinishCopyLocked(MemfdRegion& r, uint32_t page, const Result<SpillSlot>& written)
      REQUIRES(mu_);
  // Up to `most` of the oldest resident pages without a copy on SSD, while
  // the device is full enough that they are the next to be evicted.
  std::vector<PageRef> PickCopiesLocked(size_t most) REQUIRES(mu_);
  // The most pages the pipeline holds (queued or in flight) for reads
  // ahead of a touch: a share of the device.
  size_t AheadLimit() const;
  // Read-ahead that pays for itself. Counted on a sample: one page in
  // park_every_ read from disk ahead of any touch is parked (kParkedAhead in
  // PageRecord::backend):
  // written into the memfd and left unmapped in the engine's view, so that
  // the engine's first touch raises a MINOR fault, which maps the page and
  // drops the mark (HandleFault, readahead_used_pages). A page that leaves
  // the device still parked was read in vain (LeftParkedLocked, from
  // SetTierLocked: readahead_vain_pages); each such page halves the
  // read-ahead windows, and touched ones grow them back (LearnAheadLocked).
  // Reads of other layers ahead (ReplicateLocked), which run furthest ahead
  // of the engine, stop for a second after a parked page left untouched,
  // and while a page read ahead comes in from disk again within two device
  // capacities of installs (JudgeInstallLocked, which keeps the install
  // clock in the mark; ReadAheadPaysLocked): they were most of what a
  // budget below one decode step's KV read in vain. (The stop on a parked
  // page alone read twice as much on gqa-8L-6s of the matrix in an earlier
  // build; with the windows that learn, it read 3-4% in vain there.)
  void JudgeInstallLocked(PageRecord& rec, bool ahead, bool parked) REQUIRES(mu_);
  // `learn`: the windows learn from it (not when its region goes away or
  // is untiered).
  void LeftParkedLocked(PageRecord& rec, bool learn) REQUIRES(mu_);
  bool ReadAheadPaysLocked() const REQUIRES(mu_);
  // Ends one page's restore (queued or read): its disk I/O and its place
  // in restoring_pages_.
  void EndRestoreLocked(MemfdRegion& r) REQUIRES(mu_);
  // Ends the pipeline's read of the pages without installing them: they
  // stay on disk and their waiters fault again.
  void AbandonRunLocked(MemfdRegion& r, uint32_t first, uint32_t count) REQUIRES(mu_);

  // The budget (SetBudget): read without a lock, as every check of it is a
  // look at a moving residency anyway.
  uint64_t capacity() const { return capacity_.load(std::memory_order_relaxed); }
  uint64_t host_limit() const { return host_limit_.load(std::memory_order_relaxed); }
  std::atomic<uint64_t> capacity_;
  const Backend backend_;
  VaRange* const range_;
  std::atomic<uint64_t> host_limit_;
  const uint32_t fill_ahead_;
  const bool copy_ahead_;
  const bool write_protect_;
  const int fault_threads_;
  const bool copy_fill_;
  DeviceEvents* const events_;
  SpillStore* const store_;
  Counters own_counters_;
  Counters& counters_;
  UserFaultFd uffd_;
  const int stop_fd_;  // eventfd: written once to stop the fault threads
  std::vector<std::unique_ptr<std::thread>> threads_;
  std::atomic<bool> forked_{false};
  // BeforeFork's pipe: the child writes a byte once its copies are made.
  int fork_pipe_[2] = {-1, -1};
  // In the child: makes each block private (see top); mu_ is held.
  void CopyBlocksInForkChild() REQUIRES(mu_);
  std::atomic<uint64_t> coalesced_faults_{0};
  std::atomic<uint64_t> write_faults_{0};

  // Lock order: page_io_'s before mu_ before the scratch pool's and the
  // store's locks (a tick holds the runtime's tick lock before all of them).
  mutable Mutex mu_;  // the transition lock
  // With mu_: signalled when a page's disk I/O ends (its in-flight flag
  // clears), for Promote, DegradeLocked and DestroyRegion waiting on it.
  CondVar disk_io_done_;
  // With mu_: signalled when a page leaves the host tier (room for a fault
  // waiting in WaitForStagingRoom).
  CondVar staging_room_;
  // The staged pages (in the host tier, of regions still tiered), oldest
  // first, on the links resident_ uses (a page is on one list at most), and
  // their bytes (written under mu_, read by anyone).
  ResidentList<MemfdRegion> staged_ GUARDED_BY(mu_);
  std::atomic<uint64_t> staged_bytes_{0};
  CondVar drain_work_;  // with mu_: the staging is over DrainTarget(), or stop
  bool drain_stop_ GUARDED_BY(mu_) = false;
  std::unique_ptr<std::thread> drainer_;  // null: no host limit or no disk tier
  bool has_drainer_ = false;              // set once at start: drainer_ runs
  // Engine view base -> region. Heap-held so a forked child can leak it.
  std::unique_ptr<std::map<uintptr_t, MemfdRegion*>> by_base_ GUARDED_BY(mu_);
  ResidentList<MemfdRegion> resident_ GUARDED_BY(mu_);
  std::atomic<uint64_t> resident_bytes_{0};  // written under mu_, read by anyone
  // Room taken by pipeline installs under way without the lock (their
  // pages are copied in, not yet resident); MakeRoomLocked counts it.
  uint64_t installing_bytes_ GUARDED_BY(mu_) = 0;
  // Of any region made: written under mu_, read without it too (FaultReserve).
  std::atomic<size_t> max_page_size_{0};
  const std::function<void(uintptr_t, size_t)> after_unlocked_copy_;
  const uint32_t park_every_;
  const std::chrono::milliseconds staging_wait_;
  uint32_t park_clock_ GUARDED_BY(mu_) = 0;      // pages read ahead, for park_every_
  uint8_t* zero_src_ GUARDED_BY(mu_) = nullptr;  // COPY source without ZEROPAGE
  size_t zero_src_bytes_ GUARDED_BY(mu_) = 0;

  // Private page buffers for restores: each restore reads into its own, so
  // the engine never sees bytes before they are verified. Kept for reuse:
  // one per fault thread, two for Promote.
  ScratchPool scratch_;

  // The pipeline of SpillPages (concurrent callers take turns; its lock
  // comes before mu_).
  PageIo page_io_;

  // The restore pipeline's queue, streams and waiters (memfd_restore.cc).
  std::deque<RestoreJob> restore_queue_ GUARDED_BY(mu_);
  ReadStream streams_[kMaxStreams] GUARDED_BY(mu_);
  uint64_t stream_clock_ GUARDED_BY(mu_) = 0;
  StrideGuess stride_ GUARDED_BY(mu_);
  size_t restoring_pages_ GUARDED_BY(mu_) = 0;  // read jobs queued or in flight
  // Pages installed from disk so far (the clock a read-ahead mark keeps),
  // and when a page read ahead last came in from disk again soon after, or
  // a parked page left untouched.
  uint32_t installs_ GUARDED_BY(mu_) = 0;
  Clock::time_point last_vain_ GUARDED_BY(mu_){};
  // The read-ahead windows' scale, learned from the pages parked ahead:
  // each one that leaves memory untouched halves every window (at most
  // kMostAheadShift times), kAheadRegrow of them touched double it again.
  uint32_t ahead_shift_ GUARDED_BY(mu_) = 0;
  uint32_t ahead_paid_ GUARDED_BY(mu_) = 0;  // parked pages touched since the last change
  // `pages` of a read-ahead window at the scale learned (one at least).
  uint32_t ScaledWindowLocked(uint32_t pages) const REQUIRES(mu_);
  // A page parked ahead was touched (paid) or left untouched (in vain).
  void LearnAheadLocked(bool paid) REQUIRES(mu_);
  // False once UFFDIO_CONTINUE_MODE_WP failed (a kernel older than 6.4).
  bool continue_protects_ GUARDED_BY(mu_) = true;
  // Pages engine threads wait on in the pipeline (queued or being read), by
  // address, with when they faulted: installs count those as faults.
  std::unordered_map<uintptr_t, Clock::time_point> waiting_ GUARDED_BY(mu_);
  // Pages a write fault wants, and their replicas at the stride: the engine
  // writes them next, so they come back mapped writable (a write-protected
  // mapping would cost a write fault, an engine thread's sleep, at once).
  std::unordered_set<uintptr_t> write_next_ GUARDED_BY(mu_);
  CondVar restore_work_;  // with mu_: the queue has work, or stop
  bool restore_stop_ GUARDED_BY(mu_) = false;
  bool restorer_idle_ GUARDED_BY(mu_) = false;  // in its wait for work
  // Fault threads reading their own page now: the pipeline is woken after
  // those reads are on their way, so that a faulting page is not queued
  // behind megabytes read ahead (wake_held_ says one is due).
  int hold_wake_ GUARDED_BY(mu_) = 0;
  bool wake_held_ GUARDED_BY(mu_) = false;
  std::unique_ptr<std::thread> restorer_;  // null: faults restore their own page
  int restore_wake_fd_ = -1;               // eventfd: ends the pipeline's wait on I/O early
  void WakeRestorerLocked() REQUIRES(mu_);
};

}  // namespace kvtier
