// UvmDevice, the evidence side (uvm_device.h): CUPTI's unified-memory
// records applied to the page records, the runtime told of faults and driver
// evictions, and the maintenance thread that flushes CUPTI and keeps the
// device within its budget. Thread-safety: as uvm_device.h.
#include <pthread.h>

#include <chrono>

#include "runtime/device/cuda/uvm_device.h"
#include "runtime/device/cuda/uvm_region.h"
#include "runtime/log.h"

namespace kvtier::cuda {

void UvmDevice::OnUvmEvents(const UvmEvent* events, size_t count) {
  std::vector<Evicted> evicted;
  std::vector<Faulted> faulted;
  {
    MutexLock lock(&mu_);
    for (size_t i = 0; i < count; ++i) {
      const UvmEvent& e = events[i];
      if (e.kind == UvmEvent::Kind::kThrashing) {
        if (thrashing_.fetch_add(1, std::memory_order_relaxed) % 1000 == 0) {
          Log(1,
              "CUDA backend: the driver reports thrashing at %#llx (%llu bytes): pages move "
              "back and forth; a larger KVTIER_DEVICE_BUDGET or hints would help",
              static_cast<unsigned long long>(e.address), static_cast<unsigned long long>(e.bytes));
        }
        continue;
      }
      // Every page the event covers (a fault covers the faulting page).
      const uint64_t span = e.kind == UvmEvent::Kind::kGpuFault ? 1 : e.bytes;
      for (uint64_t addr = e.address; span != 0 && addr < e.address + span;) {
        UvmRegion* r = FindByAddressLocked(addr);
        if (r == nullptr) break;  // not a region of ours (or freed since)
        Region& region = *r->region;
        const uint32_t page = region.PageOf(addr);
        const Tier from = region.pages[page].tier.load(std::memory_order_relaxed);
        const bool to_device = e.kind != UvmEvent::Kind::kToHost;
        if (from == Tier::kDisk) {
          // Its bytes are on SSD and its memory discarded: no GPU work may
          // touch it (the gate opens first). A record of an earlier move may
          // still arrive; a fault means a dormant range was touched before
          // the engine woke it, which the engine promised not to do.
          if (e.kind == UvmEvent::Kind::kGpuFault) {
            static std::atomic<bool> warned{false};
            WarnOnce(&warned,
                     "CUDA disk tier: the GPU touched page %u of region %u while its bytes were on "
                     "SSD (a range hinted KVTIER_HINT_DORMANT used before KVTIER_HINT_WILL_NEED or "
                     "kvtier_wait?); the kernel read indeterminate bytes",
                     page, region.id);
          }
          addr = region.PageAddr(page) + region.page_size;
          continue;
        }
        if (to_device && from != Tier::kDevice &&
            (e.kind == UvmEvent::Kind::kGpuFault || e.cause != UvmEvent::Cause::kUser)) {
          // The driver brought it in: a GPU touch (or its own prefetcher).
          SetTierLocked(*r, page, Tier::kDevice);
          const uint64_t wait = e.end_ns > e.start_ns ? e.end_ns - e.start_ns : 0;
          Counters::Add(counters_.faults);
          Counters::Add(counters_.fault_bytes, region.page_size);
          Counters::Add(counters_.fault_ns, wait);
          faulted.push_back({r->region, page, from, wait});
        } else if (!to_device && from == Tier::kDevice && e.cause != UvmEvent::Cause::kUser) {
          SetTierLocked(*r, page, Tier::kHost);
          if (e.cause == UvmEvent::Cause::kEviction) {
            Counters::Add(counters_.driver_evictions);
            evicted.push_back({r->region, page});
          }
        }
        addr = region.PageAddr(page) + region.page_size;
      }
    }
  }
  Report(evicted, faulted);
}

void UvmDevice::Report(const std::vector<Evicted>& evicted, const std::vector<Faulted>& faulted) {
  if (config_.events == nullptr) return;
  for (const Evicted& e : evicted) config_.events->OnDriverEviction(*e.region, e.page);
  for (const Faulted& f : faulted) config_.events->OnFault(*f.region, f.page, f.from, f.wait_ns);
}

void UvmDevice::Maintain() {
  if (forked_.load()) return;
  MakeRestoreBuffers();
  CheckIdle();
  if (CuptiSource* cupti = cupti_.load(std::memory_order_acquire)) cupti->Flush(/*forced=*/true);
  std::vector<Evicted> evicted;
  {
    MutexLock lock(&mu_);
    for (int d = 0; d < kMaxDevices; ++d) {
      if (!devices_[d].ready || devices_[d].resident_list.bytes() <= devices_[d].capacity) continue;
      Status s = MakeRoomLocked(d, 0, &evicted);
      if (!s.ok()) Log(1, "%s", s.message().c_str());
    }
  }
  Report(evicted, {});
}

void UvmDevice::MaintenanceLoop() {
  pthread_setname_np(pthread_self(), "kvtier-uvm");
  MutexLock lock(&stop_mu_);
  const auto period = std::chrono::milliseconds(config_.maintenance_ms);
  while (!stopping_) {
    const auto until = std::chrono::steady_clock::now() + period;
    while (!stopping_ && stop_cv_.WaitUntil(stop_mu_, until)) {
    }
    if (stopping_) break;
    lock.Unlock();
    Maintain();
    lock.Lock();
  }
}

}  // namespace kvtier::cuda
