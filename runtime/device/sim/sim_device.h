// SimDevice: the data-backed simulated GPU. Real bytes, real faults, no GPU.
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
// Disk tier seam (later): Spill(kHost page) = under the lock mark the page in
// flight, write its bytes from the alias to the store outside the lock, then
// under the lock (unless touched meanwhile) fallocate(PUNCH_HOLE) it => kDisk.
// The next touch raises MISSING; FillMissingLocked() dispatches on the tier,
// where kDisk reads the page back (checksum verified) and installs it with
// UFFDIO_COPY. The store read must happen outside the lock.
//
// Fork: the child inherits the views but not the userfaultfd registration
// (no UFFD_FEATURE_EVENT_FORK) nor the handler threads: its touches map the
// shared memfd pages directly (it sees and shares the parent's bytes; no
// residency is enforced). The child must call AfterForkInChild(); the device
// then refuses every operation, and its destructor frees nothing (a parent
// thread may have been mid-change when fork copied the memory; exit or exec
// reclaims it).
//
// Thread-safety: all public methods are safe from any thread. One
// device-wide transition mutex serialises every residency change (faults,
// Demote, Promote, DestroyRegion) and guards the resident list; a page's
// transition (at most the evictions it needs plus one install) is the
// longest hold. DeviceEvents are called with no lock held.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/counters.h"
#include "runtime/device/device.h"
#include "runtime/device/sim/resident_list.h"
#include "runtime/device/sim/uffd.h"

struct uffd_msg;

namespace kvtier {

struct SimDeviceConfig {
  uint64_t capacity_bytes = 0;     // most bytes of tiered pages resident at once
  int fault_threads = 1;           // threads resolving faults (1..16)
  DeviceEvents* events = nullptr;  // may be null (no callbacks)
  Counters* counters = nullptr;    // may be null (the device keeps its own)
  // Fill untouched pages with UFFDIO_COPY from a zero buffer even where
  // UFFDIO_ZEROPAGE works (the path the disk tier's restore takes; tests).
  bool copy_fill = false;
};

// Per-region backend state (Region::backend points here).
struct SimRegion {
  class SimDevice* device = nullptr;
  // Held until DestroyRegion: while the view is mapped and registered, a
  // fault may need the page records, whoever else dropped the region.
  RegionPtr region;
  ShmViews views;
  std::unique_ptr<ResidentLink[]> links;  // one per page
  bool zeropage = true;                   // UFFDIO_ZEROPAGE works here (else COPY from zeros)
  bool degraded = false;                  // guarded by the device's mutex: untiered after an error
};

class SimDevice final : public Device {
 public:
  static Result<std::unique_ptr<SimDevice>> Create(const SimDeviceConfig& config);
  ~SimDevice() override;
  SimDevice(const SimDevice&) = delete;
  SimDevice& operator=(const SimDevice&) = delete;

  const char* kind() const override { return "sim"; }
  Result<RegionPtr> CreateRegion(RegionId id, size_t bytes, size_t page_size,
                                 std::string tag) override;
  void DestroyRegion(Region& region) override;
  Status Demote(Region& region, uint32_t page) override;
  Status Promote(Region& region, uint32_t page) override;
  uint64_t resident_bytes() const override;
  uint64_t capacity_bytes() const override { return capacity_; }

  // The unregistered view of a region's bytes (for the disk tier and tests).
  // Only touch pages that are on the device or the host.
  uint8_t* AliasOf(const Region& region) const;
  // Whether only user-mode faults are caught (see UserFaultFd).
  bool user_mode_only() const { return uffd_.user_mode_only(); }

  // Call in the child after fork(): the device becomes unusable (see top).
  void AfterForkInChild() override;

 private:
  using Clock = std::chrono::steady_clock;
  struct Evicted {
    RegionPtr region;  // kept alive for the callback
    uint32_t page;
  };

  SimDevice(const SimDeviceConfig& config, UserFaultFd uffd, int stop_fd);
  Status StartThreads(int count);
  void StopThreads();
  void FaultLoop();
  void HandleFault(const uffd_msg& msg, Clock::time_point read_at);

  // All *Locked methods require mu_.
  Status Usable() const;
  Result<SimRegion*> FindLocked(Region& region, uint32_t page) const;
  SimRegion* FindByAddressLocked(uintptr_t addr) const;
  // Brings `page` to the device from wherever it is (evicting as needed).
  Status BringInLocked(SimRegion& r, uint32_t page, std::vector<Evicted>* evicted);
  // Evicts least recently migrated pages until `bytes` more fit.
  Status MakeRoomLocked(uint64_t bytes, std::vector<Evicted>* evicted);
  // Installs bytes for a page with none in the engine view's memfd: the one
  // switch between "never touched" (zeros) and "spilled" (read back).
  Status FillMissingLocked(SimRegion& r, uint32_t page, Tier from);
  Status ZapLocked(SimRegion& r, uint32_t page);
  // The one place a page's tier changes: record, resident list and counters.
  void SetTierLocked(SimRegion& r, uint32_t page, Tier to);
  void Account(Tier tier, uint64_t bytes, bool add);
  // Stops tiering a region whose fault could not be resolved, so the engine
  // thread waiting on it runs on instead of hanging.
  void DegradeLocked(SimRegion& r, const Status& why);
  void ReleaseRegionLocked(SimRegion* r);
  void Report(const std::vector<Evicted>& evicted);

  const uint64_t capacity_;
  const bool copy_fill_;
  DeviceEvents* const events_;
  Counters own_counters_;
  Counters& counters_;
  UserFaultFd uffd_;
  const int stop_fd_;  // eventfd: written once to stop the fault threads
  std::vector<std::unique_ptr<std::thread>> threads_;
  std::atomic<bool> forked_{false};

  mutable std::mutex mu_;  // the transition lock
  // Engine view base -> region. Heap-held so a forked child can leak it.
  std::unique_ptr<std::map<uintptr_t, SimRegion*>> by_base_;  // guarded by mu_
  ResidentList resident_;                                     // guarded by mu_
  std::atomic<uint64_t> resident_bytes_{0};                   // written under mu_, read by anyone
  uint8_t* zero_src_ = nullptr;  // guarded by mu_; COPY source without ZEROPAGE
  size_t zero_src_bytes_ = 0;    // guarded by mu_
};

}  // namespace kvtier
