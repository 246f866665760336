// UvmDevice: the CUDA backend. Tiered regions are CUDA managed memory (UVM);
// kvtier decides which pages live in GPU memory, the driver moves the bytes.
//
// - A region is one cuMemAllocManaged allocation of whole pages, made through
//   the driver directly (driver_api.h), never through kvtier's hooks. It
//   belongs to the GPU whose context is current on the allocating thread
//   (the engine's cudaSetDevice), else the backend's first GPU; each GPU gets
//   its primary context, its own migration stream and its budget on first
//   use. An engine that drives several GPUs from one process (llama.cpp with
//   a split, HF accelerate) has its regions on each.
// - Promote: prefetch the page to its GPU on the backend's own
//   lowest-priority stream and set that GPU as its preferred location;
//   Demote: unset the preferred location and prefetch it to the host. Both
//   wait for their stream, so a move is complete when it returns. A GPU touch
//   of a host page then faults and the driver migrates it back by itself.
// - Evidence: CUPTI unified-memory records (cupti_source.h) arrive
//   asynchronously; a GPU fault or a host-to-device migration the backend did
//   not ask for makes the page device-resident (the driver moved it) and is
//   reported with DeviceEvents::OnFault; an eviction the driver made
//   (device-to-host, cause eviction) is reported with OnDriverEviction.
//   Records are evidence, not inline handling: one may arrive after a later
//   move of the same page, and the policy corrects such a page next tick.
// - Budget, per GPU: KVTIER_DEVICE_BUDGET for that GPU (never above the
//   memory it has free when first used), else nine tenths of that free
//   memory. The backend keeps each GPU's resident tiered pages within its
//   budget: Promote makes room on the page's GPU first (its least recently
//   migrated page goes to the host, as UVM would), a Promote that would leave
//   less than the headroom of that GPU's memory free for the engine fails,
//   and pages faulted in beyond a budget are sent back by the maintenance
//   thread within one period. UVM itself is never asked to hold more than
//   the budget. The policy sees the GPUs' sum (capacity_bytes); gpus() has
//   each one.
// - Disk tier (config.store; needs CUDA 13's cuMemDiscardBatchAsync). No
//   user-space handler sees a GPU fault, so a page whose bytes went to SSD
//   must be back before any GPU work can touch it. A page may therefore be
//   spilled only while the backend knows no work reaches it:
//     dormant: the engine marked it KVTIER_HINT_DORMANT, its promise not to
//       touch it until it wakes it (WILL_NEED or kvtier_wait);
//     sealed: no GPU work was submitted for idle_ns, and every call that may
//       make a GPU touch memory now first opens the gate (below).
//   Every such call of the process is reported by the SubmitWatch (CUPTI's
//   API callbacks) on its own thread before it runs: OnSubmitEnter counts
//   it in flight and, while the gate is closed, opens it (restores every
//   spilled page that is not dormant, waiting as long as that takes: a
//   stall, counted) before the call goes on. Sealing is a Dekker handshake
//   with that count: the maintenance thread marks the gate closed, finds no
//   call in flight (else it gives up until the next period), then waits for
//   every GPU's queued work (cuCtxSynchronize); only then may pages spill.
//   A call that entered before the mark has returned, so its work is queued
//   and the wait covers it; a call that enters after it sees the mark and
//   opens. Woken pages still on disk ("pending") keep the gate closed until
//   they are back. Without a watch (CUPTI missing or taken) nothing is
//   sealed, and waking a spilled page restores it at once.
//   A spill: the page (on the host: demoted first) is marked in flight; its
//   bytes are written to the store outside the lock (a page of zeros is
//   not written); then, under the lock and only if the page is still
//   dormant or sealed, the GPU memory is discarded (its contents become
//   indeterminate and its memory is freed) and the page is kDisk. A
//   restore reads the page into a private buffer (with the pages beside it
//   in consecutive slots, as one run), the store verifies its
//   checksum (a page that cannot be read back stops the process: never
//   hand the engine wrong KV), copies it into the managed page from the
//   CPU (which undoes the discard; the copies shared with the
//   "kvtier-uvm-copy" helper, copies_) and leaves it on the host; the GPU
//   faults it in, or the policy promotes it.
// - Maintenance thread ("kvtier-uvm"): flushes CUPTI's buffers, enforces
//   the budgets and seals an idle process every period.
// - Fork: the child's CUDA context is unusable; AfterForkInChild makes every
//   operation fail and the destructor leave the parent's state alone.
// Thread-safety: every public method may be called from any thread. One
// mutex guards the region map, the resident lists, the gate's state and
// every residency change; moves and discards hold it across their stream
// wait (a page move, tens of microseconds); disk I/O never runs under it
// (page_io_'s lock is taken with mu_ released, and held for a restore's
// whole read; copies_'s inside a read's callback, after page_io_'s, and
// after mu_ when a restore's copy batch ends). DeviceEvents are called with
// no lock held.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>  // std::once_flag
#include <set>
#include <thread>
#include <vector>

#include "runtime/counters.h"
#include "runtime/device/cuda/cupti_source.h"
#include "runtime/device/cuda/driver_api.h"
#include "runtime/device/cuda/submit_watch.h"
#include "runtime/device/device.h"
#include "runtime/device/resident_list.h"
#include "runtime/mutex.h"
#include "runtime/options.h"  // DeviceSizes
#include "runtime/storage/copy_lane.h"
#include "runtime/storage/page_io.h"

namespace kvtier::cuda {

struct UvmRegion;  // per-region state (uvm_device.cc)

struct UvmDeviceConfig {
  DriverApi api;
  CUdevice device = 0;  // the first GPU: regions go here when no context is current
  // Its primary context, retained (the backend releases it); null in tests,
  // which then use no contexts at all.
  CUcontext context = nullptr;
  // Bytes per GPU (KVTIER_DEVICE_BUDGET); 0 for a GPU: nine tenths of what it
  // has free at first use. Capped at that free memory, in whole pages.
  DeviceSizes budget;
  size_t page_size = size_t{2} << 20;
  // A Promote fails while the device has less than this much free memory
  // besides the page: the engine's own allocations must not be starved.
  uint64_t headroom_bytes = uint64_t{256} << 20;
  // Host link bandwidth each way, bytes per second: a PCIe Gen4 x16 figure
  // (25 GB/s achieved) until the operator gives this machine's
  // (KVTIER_LINK_BANDWIDTH, from kvtier-bench calibrate).
  double link_bps = 25e9;
  DeviceEvents* events = nullptr;
  Counters* counters = nullptr;  // may be null (the device keeps its own)
  bool use_cupti = true;
  int maintenance_ms = 20;
  // The disk tier (KVTIER_DISK_BUDGET); null: none. Must outlive the
  // device. Refused, with one warning, when the driver cannot discard.
  SpillStore* store = nullptr;
  // How long no GPU work may be submitted before the gate seals
  // (KVTIER_IDLE_MS); 0: never (only dormant pages spill).
  uint64_t idle_ns = 0;
  // Who reports work submissions: CUPTI (kCupti, started with a disk tier),
  // the caller through OnSubmitEnter/OnSubmitExit (kCaller: tests, which
  // play CUPTI), or nobody (kNone).
  enum class Watch { kNone, kCupti, kCaller };
  Watch watch = Watch::kCupti;
};

class UvmDevice final : public Device, public UvmEventSink, public SubmitSink {
 public:
  // Creates the backend's stream and starts the maintenance thread.
  static Result<std::unique_ptr<UvmDevice>> Create(UvmDeviceConfig config);
  ~UvmDevice() override;
  UvmDevice(const UvmDevice&) = delete;
  UvmDevice& operator=(const UvmDevice&) = delete;

  Backend backend() const override { return Backend::kCuda; }
  Result<RegionPtr> CreateRegion(RegionId id, size_t bytes, size_t page_size,
                                 std::string tag) override;
  void DestroyRegion(Region& region) override;
  Status Demote(Region& region, uint32_t page) override;
  // From the disk tier too: restored, then moved.
  Status Promote(Region& region, uint32_t page) override;
  // Spills kHost pages that are dormant or sealed (others: ok, nothing done;
  // the policy picks only those, see MaySpill). An error for a page whose
  // write or discard failed: it stays on the host, nothing is lost.
  Status Spill(Region& region, uint32_t page) override;
  void SpillPages(std::span<const PageRef> pages, std::span<Status> results) override;
  bool has_disk_tier() const override { return store_ != nullptr; }
  Status SetDormant(Region& region, uint32_t first, uint32_t count, bool dormant) override;
  Status Restore(Region& region, uint32_t first, uint32_t count) override;
  void AfterForkInChild() override;
  uint64_t resident_bytes() const override;
  uint64_t capacity_bytes() const override;
  std::vector<GpuUsage> gpus() const override;
  // Each move waits for its prefetch on the backend's stream; the mover
  // budgets them by the link (KVTIER_LINK_BANDWIDTH overrides this).
  LinkRates link_rates() const override { return {config_.link_bps, config_.link_bps, 0}; }

  // UvmEventSink (CUPTI records).
  void OnUvmEvents(const UvmEvent* events, size_t count) override;
  // SubmitSink (the SubmitWatch): the gate. Calls from kvtier's own threads,
  // and from inside the backend, are not the engine's and pass.
  void OnSubmitEnter() override;
  void OnSubmitExit() override;
  // Seals the gate when no work was submitted for idle_ns (the maintenance
  // thread calls it every period; tests call it themselves). Waits for
  // every GPU's queued work first.
  void CheckIdle();
  // Whether pages may spill without a dormant hint now.
  bool sealed() const { return sealed_.load(std::memory_order_acquire); }
  // Whether work submissions are seen (a watch runs or the caller reports).
  bool gating() const { return gating_; }
  // Read buffers kept for restores (tests).
  size_t restore_buffers_kept() const { return scratch_.kept(); }

  // One maintenance pass now: make the restores' read buffers once a spill
  // wrote a page, seal an idle process, flush CUPTI (forced), then send pages
  // beyond the capacity back to the host. Tests call it; the thread runs it
  // periodically.
  void Maintain();
  // Thrashing reports received from the driver.
  uint64_t thrashing_reports() const { return thrashing_.load(std::memory_order_relaxed); }
  // Whether CUPTI records are being collected.
  bool observing_faults() const { return cupti_.load(std::memory_order_acquire) != nullptr; }

 private:
  friend struct UvmRegion;
  // A page's place in its GPU's resident list (runtime/device/resident_list.h).
  using Link = ResidentLink<UvmRegion>;
  struct Evicted {
    RegionPtr region;
    uint32_t page;
  };
  struct Faulted {
    RegionPtr region;
    uint32_t page;
    Tier from;
    uint64_t wait_ns;
  };
  // What the backend holds on one GPU, set up on first use.
  struct DeviceState {
    bool ready = false;
    CUcontext context = nullptr;  // its primary context, retained
    CUstream stream = nullptr;    // the migration stream, lowest priority
    uint64_t free_checked_ns = 0;
    uint64_t free_bytes = 0;
    uint64_t capacity = 0;  // its budget, whole pages
    // Its pages, least recently migrated first (what UVM evicts first; it
    // cannot see accesses to resident pages), and their bytes.
    ResidentList<UvmRegion> resident_list;
  };
  static constexpr int kMaxDevices = 64;

  explicit UvmDevice(UvmDeviceConfig config);
  Status Usable() const;
  Result<DeviceState*> DeviceLocked(CUdevice device) REQUIRES(mu_);
  Result<UvmRegion*> FindLocked(const Region& region, uint32_t page) const REQUIRES(mu_);
  UvmRegion* FindByAddressLocked(uintptr_t addr) const REQUIRES(mu_);
  // Moves one page and waits for it.
  Status MoveLocked(UvmRegion& r, uint32_t page, bool to_host) REQUIRES(mu_);
  // Sends the GPU's least recently migrated pages to the host until `bytes`
  // more fit its budget.
  Status MakeRoomLocked(CUdevice device, uint64_t bytes, std::vector<Evicted>* evicted)
      REQUIRES(mu_);
  // The GPU's budget from the option and the memory it has free now.
  Status SizeBudgetLocked(CUdevice device, DeviceState& state) REQUIRES(mu_);
  Status CheckFreeMemoryLocked(CUdevice device, uint64_t bytes) REQUIRES(mu_);
  void SetTierLocked(UvmRegion& r, uint32_t page, Tier to) REQUIRES(mu_);
  void Report(const std::vector<Evicted>& evicted, const std::vector<Faulted>& faulted);

  // Disk tier (uvm_disk_tier.cc). Every *Locked method requires mu_;
  // RestoreLocked releases it during I/O and holds it again when it returns.
  using PageKey = std::pair<UvmRegion*, uint32_t>;
  // Whether the page may be discarded now: dormant, or the gate sealed.
  bool GatedLocked(const PageRecord& rec) const REQUIRES(mu_);
  // Brings kDisk pages that are not in flight back to the host.
  void RestoreLocked(const std::vector<PageKey>& pages) REQUIRES(mu_);
  // The private buffers a restore keeps for pages of `page_size`: a window
  // of reads in flight and the copies behind them.
  static size_t RestoreBuffers(size_t page_size);
  // Makes a restore's read buffers (a window's worth of runs and the copies
  // behind them: 9.25 MiB for pages of 64 KiB, 70 MiB for 2 MiB) once a
  // spill has written a page, on the maintenance thread (Maintain), so that
  // the first returning session finds them rather than filling new memory
  // on its way back. They stay for the device's life, as a restore's do.
  void MakeRestoreBuffers() EXCLUDES(mu_);
  // Restores kDisk pages of [first, first+count) until none is left.
  void RestoreRangeLocked(UvmRegion& r, uint32_t first, uint32_t count) REQUIRES(mu_);
  // Opens the gate: unseals and restores every pending page (engine thread).
  void OpenGate();
  // closed_ from the state it sums up.
  void UpdateClosedLocked() REQUIRES(mu_);
  // Discards the pages' GPU memory (their bytes are safe on disk); false
  // and why when the driver refused.
  Status DiscardLocked(const std::vector<PageKey>& pages) REQUIRES(mu_);
  void EndDiskIoLocked(UvmRegion& r) REQUIRES(mu_);
  // Reads a spilled page into dst; stops the process if it cannot.
  void ReadOrDie(const UvmRegion& r, uint32_t page, const Status& read);
  void StartCupti();
  void MaintenanceLoop();

  const UvmDeviceConfig config_;
  Counters own_counters_;
  Counters& counters_;
  std::atomic<bool> forked_{false};
  std::atomic<uint64_t> resident_bytes_{0};  // every GPU's
  std::atomic<uint64_t> capacity_bytes_{0};  // the budgets of the GPUs in use
  std::atomic<uint64_t> thrashing_{0};

  mutable Mutex mu_;
  std::map<uintptr_t, UvmRegion*> by_base_ GUARDED_BY(mu_);
  DeviceState devices_[kMaxDevices] GUARDED_BY(mu_);

  std::once_flag cupti_once_;
  std::atomic<CuptiSource*> cupti_{nullptr};  // set once by StartCupti, owned

  // Disk tier and gate.
  SpillStore* const store_;  // null: no disk tier
  bool gating_ = false;      // submissions are seen (set in Create)
  std::unique_ptr<SubmitWatch> watch_;
  ScratchPool scratch_;
  // MakeRestoreBuffers' progress: none yet, due (a spill wrote a page), made.
  enum class Buffers : uint8_t { kNone, kDue, kMade };
  std::atomic<Buffers> restore_buffers_{Buffers::kNone};
  CopyLane copies_;                  // restores' copies into managed memory
  PageIo page_io_;                   // its lock comes before mu_
  std::atomic<bool> sealed_{false};  // Region::spill_gate of every region
  // A submission must open the gate first: sealed, being sealed, or woken
  // pages still on disk. Written under mu_, read by every submission.
  std::atomic<bool> closed_{false};
  std::atomic<int64_t> in_flight_{0};  // submissions between enter and exit
  std::atomic<uint64_t> last_submit_ns_{0};
  bool sealing_ GUARDED_BY(mu_) = false;
  uint64_t gate_epoch_ GUARDED_BY(mu_) = 0;    // +1 at every opening
  std::set<PageKey> pending_ GUARDED_BY(mu_);  // on disk and not dormant
  int disk_io_ GUARDED_BY(mu_) = 0;            // pages being spilled or restored
  CondVar disk_io_done_;                       // with mu_

  Mutex stop_mu_;
  CondVar stop_cv_;
  bool stopping_ GUARDED_BY(stop_mu_) = false;
  std::unique_ptr<std::thread> maintenance_;
};

}  // namespace kvtier::cuda
