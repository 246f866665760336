// ModelDevice: the model-only simulated GPU (docs/design.md section 4).
//
// Page states and a virtual clock, no backing memory: an H200 with 141 GB of
// HBM, 1 TB of DRAM and TBs of SSD runs on a laptop. It is a Device, so the
// same policies and move execution drive it as drive the data-backed simulator
// and the CUDA backend. What it models is the CUDA backend (UVM):
//  - three serial channels: host->device (PCIe/C2C H2D), device->host (D2H,
//    full duplex with H2D) and the SSD; each transfer occupies its channel
//    for latency + bytes / bandwidth, in issue order;
//  - Promote is a prefetch (cudaMemPrefetchAsync) at the link bandwidth
//    (of a never-touched page: populating it on the device, no copy);
//    Demote a prefetch to the host; Spill a write to the SSD tier;
//  - Touch is a kernel reading pages: resident pages cost nothing, pages on
//    their way up are waited for, others fault. Faults are serviced in
//    batches of VA blocks (2 MiB: a service latency per batch, however many
//    kvtier pages of its blocks fault) and migrate at the fault-driven
//    bandwidth (NVIDIA: on-demand migration is at least 2x slower than
//    prefetch). A first touch populates the page on the device (no copy).
//  - when the device is full, a fault or prefetch waits for a frame that a
//    demotion in progress frees; with none in progress the driver evicts the
//    least recently migrated page itself, synchronously (UVM's behaviour).
// Time only moves forward through AdvanceTo; Demote/Promote/Spill/Touch act
// at now_ns(). Completed transfers apply when the clock passes their end.
// Thread-safety: every method takes the device mutex (the Device contract);
// DeviceEvents are called after it is released.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/clock.h"
#include "runtime/device/device.h"
#include "runtime/mutex.h"

namespace kvtier {

// Costs and capacities, in bytes, bytes per second and nanoseconds.
struct ModelCosts {
  uint64_t device_bytes = 0;  // HBM the tiered regions may occupy
  // Host tier budget. As on the other backends it is the policy's to keep
  // (demotions are not refused); the model reports the peak it reached.
  uint64_t host_bytes = 0;
  uint64_t disk_bytes = 0;          // disk tier budget; 0 = no disk tier
  double h2d_bps = 0;               // prefetch / explicit copy, host to device
  double d2h_bps = 0;               // demotion and eviction copies
  double fault_bps = 0;             // fault-driven migration, host to device
  uint64_t fault_batch_ns = 0;      // service latency of one fault batch
  uint32_t fault_batch_blocks = 1;  // VA blocks one batch resolves
  // The driver's fault unit (UVM's VA block): faults on kvtier pages of one
  // block are serviced together, whatever the kvtier page size.
  uint64_t fault_block_bytes = 2u << 20;
  double ssd_read_bps = 0;
  double ssd_write_bps = 0;
  // Request setup per `ssd_io_bytes` of I/O (the profiles state it per 2 MiB
  // request); a smaller page pays its share: the store coalesces spills and
  // keeps several requests in flight, so setups overlap.
  uint64_t ssd_latency_ns = 0;
  uint64_t ssd_io_bytes = 2u << 20;
};

// Cumulative counters of the device (bytes per tier boundary and cause).
struct ModelDeviceStats {
  uint64_t h2d_fault_bytes = 0;     // migrated by faults
  uint64_t h2d_prefetch_bytes = 0;  // migrated by Promote
  uint64_t d2h_demote_bytes = 0;    // Demote
  uint64_t d2h_evict_bytes = 0;     // driver evictions (device full on a fault/prefetch)
  uint64_t disk_write_bytes = 0;    // Spill
  uint64_t disk_read_bytes = 0;     // faults and promotions of spilled pages
  uint64_t faults = 0;              // pages faulted from host or disk
  uint64_t fault_batches = 0;       // each costs fault_batch_ns
  uint64_t first_touches = 0;       // untouched pages populated by a fault
  uint64_t populated = 0;           // untouched pages populated by Promote
  uint64_t driver_evictions = 0;
  uint64_t aborted_demotions = 0;  // touched or promoted while moving down
  uint64_t fault_wait_ns = 0;      // sum over faulted pages of their wait
  uint64_t host_peak_bytes = 0;    // most host bytes held at once
};

class ModelDevice : public Device {
 public:
  // `events` (may be null) hears of faults and driver evictions.
  ModelDevice(const ModelCosts& costs, DeviceEvents* events);
  ~ModelDevice() override;
  ModelDevice(const ModelDevice&) = delete;
  ModelDevice& operator=(const ModelDevice&) = delete;

  // Device
  Backend backend() const override { return Backend::kSim; }  // a GPU's stand-in
  const char* kind() const override { return "model"; }
  Result<RegionPtr> CreateRegion(RegionId id, size_t bytes, size_t page_size,
                                 std::string tag) override;
  void DestroyRegion(Region& region) override;
  Status Demote(Region& region, uint32_t page) override;
  Status Promote(Region& region, uint32_t page) override;
  Status Spill(Region& region, uint32_t page) override;
  // Bytes whose destination is the device: resident pages and pages on their
  // way up (pages on their way down are already leaving).
  uint64_t resident_bytes() const override;
  uint64_t capacity_bytes() const override { return costs_.device_bytes; }
  // The prefetch link each way and the SSD's write speed.
  LinkRates link_rates() const override {
    return {costs_.h2d_bps, costs_.d2h_bps, costs_.ssd_write_bps};
  }

  // The virtual clock.
  uint64_t now_ns() const;
  // The same, as a Clock for the tick engine and the mover.
  const Clock& clock() const { return clock_; }
  // Moves the clock to `t_ns` (never back) and applies the transfers that
  // completed by then.
  void AdvanceTo(uint64_t t_ns);
  // End time of the last transfer queued on any channel (for draining).
  uint64_t busy_until_ns() const;
  // True while a transfer is queued or running.
  bool transfers_pending() const;

  // A kernel touches `n` pages of `region` at now_ns(). Returns the time at
  // which all of them are on the device (now_ns() if they all are already).
  // Faults are resolved in the order given.
  uint64_t Touch(Region& region, const uint32_t* pages, size_t n);

  uint64_t host_used_bytes() const;
  uint64_t disk_used_bytes() const;
  // Incremented whenever a page starts to leave the device; a caller that saw
  // all of a set of pages resident at epoch E knows they still are while the
  // epoch is E.
  uint64_t residency_epoch() const;
  ModelDeviceStats stats() const;
  const ModelCosts& costs() const { return costs_; }

 private:
  enum class Op : uint8_t { kNone, kUp, kDown, kSpill };
  struct PageState {
    uint64_t ready_ns = 0;  // end of the transfer in flight
    uint32_t stamp = 0;     // bumped per transfer and per arrival; stale queue entries differ
    Op op = Op::kNone;
  };
  struct RegionState {
    Region* region = nullptr;
    std::vector<PageState> pages;
  };
  struct Pending {  // one transfer in a channel queue
    RegionId region;
    uint32_t page;
    uint32_t stamp;
    uint64_t end_ns;
  };
  struct Lrm {  // least-recently-migrated order of device pages
    RegionId region;
    uint32_t page;
    uint32_t stamp;
  };
  struct Event {
    bool eviction;
    Region* region;
    uint32_t page;
    Tier from;
    uint64_t wait_ns;
  };

  RegionState* StateOf(RegionId id) REQUIRES(mu_);
  void PromoteLocked(RegionState& rs, uint32_t page, std::vector<Event>* events) REQUIRES(mu_);
  void AdvanceLocked(uint64_t t) REQUIRES(mu_);
  void CompleteUp(const Pending& p) REQUIRES(mu_);
  void CompleteDown(const Pending& p) REQUIRES(mu_);
  void CompleteSpill(const Pending& p) REQUIRES(mu_);
  // Reserves a device frame for a page arriving at or after `t`; returns when
  // the frame is free. May finish a demotion early in the books or evict.
  uint64_t AcquireFrame(uint64_t t, uint64_t bytes, std::vector<Event>* events) REQUIRES(mu_);
  void NoteArrival(RegionState& rs, uint32_t page) REQUIRES(mu_);
  uint64_t Transfer(uint64_t* channel_free, uint64_t start, uint64_t bytes, double bps,
                    uint64_t latency_ns);
  // Reads a spilled page back into host memory; returns when it is there.
  uint64_t ReadFromDisk(uint64_t t, uint64_t bytes) REQUIRES(mu_);
  uint64_t SsdLatency(uint64_t bytes) const;  // the setup share of `bytes` of I/O
  void Notify(const std::vector<Event>& events);

  class VirtualClock final : public Clock {
   public:
    explicit VirtualClock(const ModelDevice* d) : d_(d) {}
    uint64_t NowNs() const override { return d_->now_ns(); }

   private:
    const ModelDevice* d_;
  };

  const ModelCosts costs_;
  DeviceEvents* const events_;
  const VirtualClock clock_{this};

  mutable Mutex mu_;
  uint64_t now_ GUARDED_BY(mu_) = 0;
  uint64_t h2d_free_ GUARDED_BY(mu_) = 0;  // channel free times
  uint64_t d2h_free_ GUARDED_BY(mu_) = 0;
  uint64_t ssd_free_ GUARDED_BY(mu_) = 0;
  uint64_t occupied_ GUARDED_BY(mu_) = 0;  // device frames in use, bytes
  uint64_t leaving_ GUARDED_BY(mu_) = 0;   // bytes on their way down
  uint64_t host_used_ GUARDED_BY(mu_) = 0;
  uint64_t disk_used_ GUARDED_BY(mu_) = 0;
  uint64_t epoch_ GUARDED_BY(mu_) = 0;
  uint64_t next_base_ GUARDED_BY(mu_) = 0x7f0000000000ull;
  std::deque<Pending> up_ GUARDED_BY(mu_);    // promotions, in end order
  std::deque<Pending> down_ GUARDED_BY(mu_);  // demotions, in end order
  std::deque<Pending> spill_ GUARDED_BY(mu_);
  std::deque<Lrm> lrm_ GUARDED_BY(mu_);
  std::unordered_map<RegionId, RegionState> regions_ GUARDED_BY(mu_);
  ModelDeviceStats stats_ GUARDED_BY(mu_);
};

}  // namespace kvtier
