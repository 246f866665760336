// Device: the seam between the runtime and a GPU (real or simulated).
//
// A backend creates and destroys tiered regions and moves their pages between
// the device and host tiers. It owns the truth of residency: it changes a
// page's tier only while holding its own transition lock, and reports faults
// and forced evictions to the runtime through DeviceEvents. Implementations:
// device/memfd (memfd + userfaultfd, no GPU needed: the simulated GPU and the
// host backend) and device/cuda (UVM).
// Thread-safety: every method may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "runtime/options.h"
#include "runtime/page_table.h"
#include "runtime/status.h"

namespace kvtier {

// Callbacks from a backend into the runtime. Called from the backend's own
// threads (fault handlers) with no backend lock held; must not block.
class DeviceEvents {
 public:
  virtual ~DeviceEvents() = default;
  // A touch of a non-resident page was resolved by bringing it to the device.
  // `from` is where it was; `wait_ns` how long the toucher waited.
  virtual void OnFault(Region& region, uint32_t page, Tier from, uint64_t wait_ns) = 0;
  // The device was full when a fault or prefetch needed room, so the backend
  // evicted `page` itself (least recently migrated first, as UVM does).
  virtual void OnDriverEviction(Region& region, uint32_t page) = 0;
  // Pages [first, first + count) came to the device ahead of any touch (read
  // back with a faulting page, brought back from the host tier with it, or
  // populated after a first touch): evidence that the engine is about to
  // use them, not a fault. `from`: where they were (kUntouched: populated).
  virtual void OnArrivedAhead(Region& region, uint32_t first, uint32_t count, Tier from) {}
};

class Device {
 public:
  virtual ~Device() = default;
  // What it is: kCuda, kSim or kHost (the rest of kvtier compares this,
  // never kind()'s words).
  virtual Backend backend() const = 0;
  // Its name in the stats and logs: BackendName(backend()), "cuda", "sim"
  // or "host" (a test's or a benchmark's model device names itself).
  virtual const char* kind() const { return BackendName(backend()); }

  // Creates a region of `bytes` (backed in whole pages of `page_size`). Its
  // pages start kUntouched; the first touch makes them resident.
  virtual Result<RegionPtr> CreateRegion(RegionId id, size_t bytes, size_t page_size,
                                         std::string tag) = 0;
  // Releases the region's memory (and spill slots). The region must not be
  // used afterwards.
  virtual void DestroyRegion(Region& region) = 0;

  // Moves one page device -> host. Ok and no-op if the page is not on the device.
  virtual Status Demote(Region& region, uint32_t page) = 0;
  // Moves one page to the device ahead of use (prefetch), evicting the least
  // recently migrated page if the device is full. Ok and no-op if resident.
  virtual Status Promote(Region& region, uint32_t page) = 0;
  // Demote for each of `pages` (results[i] for pages[i]; the spans have one
  // size). A backend may move them together; the default demotes one page
  // after another.
  virtual void DemotePages(std::span<const PageRef> pages, std::span<Status> results) {
    for (size_t i = 0; i < pages.size(); ++i) results[i] = Demote(*pages[i].region, pages[i].page);
  }
  // Moves one host page to the disk tier. Default: unsupported.
  virtual Status Spill(Region& region, uint32_t page) {
    return Status::Error("this device backend has no disk tier");
  }
  // Spill for each of `pages` (results[i] for pages[i]; the spans have one
  // size). A backend with a disk tier keeps several writes in flight;
  // the default spills one page after another.
  virtual void SpillPages(std::span<const PageRef> pages, std::span<Status> results) {
    for (size_t i = 0; i < pages.size(); ++i) results[i] = Spill(*pages[i].region, pages[i].page);
  }

  // Whether Spill can work (a disk tier exists and the backend can use it).
  virtual bool has_disk_tier() const { return false; }

  // Cooperative ranges (kvtier.h): dormant=true marks [first, first+count)
  // KVTIER_HINT_DORMANT, the engine's promise not to touch those pages until
  // it wakes them (dormant=false, from KVTIER_HINT_WILL_NEED or
  // kvtier_wait); a dormant page may go to the disk tier even where the
  // backend cannot otherwise tell that no GPU work reaches it. A woken
  // spilled page is back before the engine can touch it again.
  virtual Status SetDormant(Region& region, uint32_t first, uint32_t count, bool dormant) {
    for (uint32_t p = first; p < first + count && p < region.pages.size(); ++p) {
      if (dormant) {
        region.pages[p].flags.fetch_or(kPageDormant, std::memory_order_relaxed);
      } else {
        region.pages[p].flags.fetch_and(static_cast<uint8_t>(~kPageDormant),
                                        std::memory_order_relaxed);
      }
    }
    return Status::Ok();
  }
  // Wakes [first, first+count) and returns once none of its pages is on the
  // disk tier (kvtier_wait). Default: promotes each spilled page.
  virtual Status Restore(Region& region, uint32_t first, uint32_t count) {
    if (Status s = SetDormant(region, first, count, false); !s.ok()) return s;
    for (uint32_t p = first; p < first + count && p < region.pages.size(); ++p) {
      if (region.pages[p].tier.load(std::memory_order_acquire) != Tier::kDisk) continue;
      if (Status s = Promote(region, p); !s.ok()) return s;
    }
    return Status::Ok();
  }

  // Bytes per second the backend moves up (to the device), down (to the
  // host) and to disk when its moves run asynchronously, so the mover can
  // budget a tick by them; 0 where a move's call returns only once its bytes
  // have moved (the tick's deadline bounds those).
  struct LinkRates {
    double up = 0, down = 0, spill = 0;
  };
  virtual LinkRates link_rates() const { return {}; }

  // fork(), in three steps (pthread_atfork's): BeforeFork in the parent
  // before it forks, AfterForkInParent in the parent once fork returns, and
  // AfterForkInChild in the child. The parent's threads are gone in the
  // child and a lock may have been held at fork time, so the backend then
  // refuses further use. A backend whose memory the child must not share
  // (the host backend) gives the child private copies in between.
  virtual void BeforeFork() {}
  virtual void AfterForkInParent() {}
  virtual void AfterForkInChild() {}

  // Bytes of tiered pages resident on the device, and the most allowed
  // (over every GPU the backend uses).
  virtual uint64_t resident_bytes() const = 0;
  virtual uint64_t capacity_bytes() const = 0;
  // Whether resident pages are host memory (the memfd device: the simulated
  // GPU's and the host backend's), charged within the process's memory wall.
  virtual bool resident_in_host_memory() const { return false; }
  // Changes the budget while the device runs (the automatic budget that
  // follows the memory wall, runtime/memory_wall.h): the most bytes of
  // tiered pages resident, and the most the host tier may hold before a
  // fault waits for room. The policy moves pages out to meet a smaller one.
  // false: this device keeps the budget it started with.
  virtual bool SetBudget(uint64_t capacity_bytes, uint64_t host_limit_bytes) { return false; }

  // The same per GPU, for the stats: one row per GPU in use, by ordinal.
  struct GpuUsage {
    int ordinal = 0;
    uint64_t used = 0, budget = 0;
  };
  virtual std::vector<GpuUsage> gpus() const { return {{0, resident_bytes(), capacity_bytes()}}; }
};

}  // namespace kvtier
