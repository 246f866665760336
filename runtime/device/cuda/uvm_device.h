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
// - Maintenance thread ("kvtier-uvm"): flushes CUPTI's buffers and enforces
//   the budgets every period.
// - Fork: the child's CUDA context is unusable; AfterForkInChild makes every
//   operation fail and the destructor leave the parent's state alone.
// Thread-safety: every public method may be called from any thread. One
// mutex guards the region map, the resident lists and every residency
// change; moves hold it across their stream wait (a page move, tens of
// microseconds). DeviceEvents are called with no lock held.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>  // std::once_flag
#include <thread>
#include <vector>

#include "runtime/counters.h"
#include "runtime/device/cuda/cupti_source.h"
#include "runtime/device/cuda/driver_api.h"
#include "runtime/device/device.h"
#include "runtime/mutex.h"
#include "runtime/options.h"  // DeviceSizes

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
};

class UvmDevice final : public Device, public UvmEventSink {
 public:
  // Creates the backend's stream and starts the maintenance thread.
  static Result<std::unique_ptr<UvmDevice>> Create(UvmDeviceConfig config);
  ~UvmDevice() override;
  UvmDevice(const UvmDevice&) = delete;
  UvmDevice& operator=(const UvmDevice&) = delete;

  const char* kind() const override { return "cuda"; }
  Result<RegionPtr> CreateRegion(RegionId id, size_t bytes, size_t page_size,
                                 std::string tag) override;
  void DestroyRegion(Region& region) override;
  Status Demote(Region& region, uint32_t page) override;
  Status Promote(Region& region, uint32_t page) override;
  void AfterForkInChild() override;
  uint64_t resident_bytes() const override;
  uint64_t capacity_bytes() const override;
  std::vector<GpuUsage> gpus() const override;
  // Each move waits for its prefetch on the backend's stream; the mover
  // budgets them by the link (KVTIER_LINK_BANDWIDTH overrides this).
  LinkRates link_rates() const override {
    return {config_.link_bps, config_.link_bps, 0};
  }

  // UvmEventSink (CUPTI records).
  void OnUvmEvents(const UvmEvent* events, size_t count) override;

  // One maintenance pass now: flush CUPTI (forced), then send pages beyond the
  // capacity back to the host. Tests call it; the thread runs it periodically.
  void Maintain();
  // Thrashing reports received from the driver.
  uint64_t thrashing_reports() const { return thrashing_.load(std::memory_order_relaxed); }
  // Whether CUPTI records are being collected.
  bool observing_faults() const { return cupti_.load(std::memory_order_acquire) != nullptr; }

 private:
  friend struct UvmRegion;
  // The resident list: pages on the device, least recently migrated first
  // (what UVM evicts first; it cannot see accesses to resident pages).
  struct Link {
    Link* prev = nullptr;
    Link* next = nullptr;
    UvmRegion* owner = nullptr;
    uint32_t page = 0;
  };
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
    uint64_t resident = 0;  // bytes of tiered pages on it
    Link resident_list;     // sentinel: its pages, least recently migrated first
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
  void Account(Tier tier, uint64_t bytes, bool add);
  void Report(const std::vector<Evicted>& evicted, const std::vector<Faulted>& faulted);
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

  Mutex stop_mu_;
  CondVar stop_cv_;
  bool stopping_ GUARDED_BY(stop_mu_) = false;
  std::unique_ptr<std::thread> maintenance_;
};

}  // namespace kvtier::cuda
