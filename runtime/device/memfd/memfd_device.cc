// MemfdDevice: regions, residency transitions and the simulated driver's
// eviction (see memfd_device.h). The fault threads live in memfd_fault_loop.cc.
#include "runtime/device/memfd/memfd_device.h"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "runtime/log.h"
#include "runtime/va_range.h"

namespace kvtier {
namespace {

bool IsPowerOfTwo(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

}  // namespace

Result<std::unique_ptr<MemfdDevice>> MemfdDevice::Create(const MemfdDeviceConfig& config) {
  const char* const who = Who(config.backend);
  if (config.capacity_bytes == 0) {
    return Status::Errorf(
        "%s: capacity is 0 bytes (give it a device budget: KVTIER_DEVICE_BUDGET or "
        "KVTIER_SIM_DEVICE_MEMORY)",
        who);
  }
  if (config.fault_threads < 1 || config.fault_threads > 16) {
    return Status::Errorf("%s: %d fault threads (accepted: 1..16)", who, config.fault_threads);
  }
  const Status opened = CheckStartStep(config.check_step, "userfaultfd");
  Result<UserFaultFd> uffd = opened.ok() ? UserFaultFd::Open() : Result<UserFaultFd>(opened);
  if (!uffd.ok()) return uffd.status().Annotate(who);
  if (Status s = CheckStartStep(config.check_step, "eventfd"); !s.ok()) {
    return s.Annotate(std::string(who) + ": eventfd");
  }
  const int stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (stop_fd < 0) {
    return Status::Errorf("%s: eventfd failed: %s", who, strerror(errno));
  }
  std::unique_ptr<MemfdDevice> device(new MemfdDevice(config, std::move(uffd).value(), stop_fd));
  Status started = device->StartThreads(config.fault_threads, config.check_step);
  if (started.ok()) started = device->StartRestorer(config.check_step);
  if (started.ok()) started = device->StartDrainer(config.check_step);
  if (!started.ok()) return started.Annotate(who);
  Log(1, "%s: capacity %llu bytes, %d fault threads, userfaultfd from %s, disk tier %s", who,
      static_cast<unsigned long long>(config.capacity_bytes), config.fault_threads,
      device->uffd_.origin(), config.store ? config.store->io_mode() : "off");
  return device;
}

MemfdDevice::MemfdDevice(const MemfdDeviceConfig& config, UserFaultFd uffd, int stop_fd)
    : capacity_(config.capacity_bytes),
      backend_(config.backend),
      range_(config.range),
      host_limit_(config.host_limit_bytes),
      fill_ahead_(config.fill_ahead_pages),
      copy_ahead_(config.copy_ahead),
      write_protect_(config.write_protect),
      fault_threads_(config.fault_threads),
      copy_fill_(config.copy_fill),
      events_(config.events),
      store_(config.store),
      counters_(config.counters ? *config.counters : own_counters_),
      uffd_(std::move(uffd)),
      stop_fd_(stop_fd),
      by_base_(std::make_unique<std::map<uintptr_t, MemfdRegion*>>()),
      after_unlocked_copy_(config.after_unlocked_copy),
      park_every_(config.park_every),
      staging_wait_(config.staging_wait),
      scratch_(static_cast<size_t>(config.fault_threads) + 2, Who(config.backend)),
      page_io_(config.store) {}

MemfdDevice::~MemfdDevice() {
  if (forked_.load()) {
    // The threads and the region state belong to the parent's history: a
    // thread may have been mid-change when fork copied the memory. Free
    // nothing; exit or exec reclaims it.
    for (auto& t : threads_) (void)t.release();
    (void)restorer_.release();
    (void)drainer_.release();
    (void)by_base_.release();
    return;
  }
  StopThreads();
  close(stop_fd_);
  if (restore_wake_fd_ >= 0) close(restore_wake_fd_);
  MutexLock lock(&mu_);
  while (!by_base_->empty()) ReleaseRegionLocked(by_base_->begin()->second);
  if (zero_src_) munmap(zero_src_, zero_src_bytes_);
}

void MemfdDevice::BeforeFork() NO_THREAD_SAFETY_ANALYSIS {
  if (range_ == nullptr || forked_.load()) return;
  // Held across fork, in the lock order (a region's release gives its span
  // back under mu_): mu_ until the child has its copies, the range's lock
  // only so that the child's copy of its span lists is whole.
  mu_.Lock();
  range_->LockForFork();
  if (pipe2(fork_pipe_, O_CLOEXEC) != 0) fork_pipe_[0] = fork_pipe_[1] = -1;
}

void MemfdDevice::AfterForkInParent() NO_THREAD_SAFETY_ANALYSIS {
  if (range_ == nullptr || forked_.load()) return;
  range_->UnlockAfterFork();
  if (fork_pipe_[0] >= 0) {
    close(fork_pipe_[1]);
    // A byte once the child has its copies; end of file if it died first
    // (or fork failed: then nobody else holds the write end).
    char byte;
    while (read(fork_pipe_[0], &byte, 1) < 0 && errno == EINTR) {
    }
    close(fork_pipe_[0]);
    fork_pipe_[0] = fork_pipe_[1] = -1;
  }
  mu_.Unlock();
}

void MemfdDevice::AfterForkInChild() NO_THREAD_SAFETY_ANALYSIS {
  const bool was_forked = forked_.exchange(true);
  if (range_ == nullptr || was_forked) return;
  CopyBlocksInForkChild();
  range_->UnlockAfterFork();
  mu_.Unlock();
  if (fork_pipe_[1] >= 0) {
    while (write(fork_pipe_[1], "x", 1) < 0 && errno == EINTR) {
    }
    close(fork_pipe_[1]);
    close(fork_pipe_[0]);
  }
}

// Runs with mu_ and the range's lock held (BeforeFork took them in the parent).
void MemfdDevice::CopyBlocksInForkChild() NO_THREAD_SAFETY_ANALYSIS {
  for (const auto& [base, r] : *by_base_) {
    const size_t bytes = r->views.bytes;
    const size_t page_size = r->region->page_size;
    void* copy = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (copy == MAP_FAILED) {
      Log(0,
          "fork child: no memory for a private copy of a tiered block (%zu bytes at %p): %s; "
          "stopping the child",
          bytes, reinterpret_cast<void*>(base), strerror(errno));
      _exit(70);
    }
    auto* dst = static_cast<uint8_t*>(copy);
    for (uint32_t p = 0; p < r->region->pages.size(); ++p) {
      const PageRecord& rec = r->region->pages[p];
      const size_t off = size_t{p} * page_size;
      const Tier tier = rec.tier.load(std::memory_order_relaxed);
      // A page on disk is read from its slot, in a degraded region too: its
      // read back into the memfd may not have run yet (DegradeLocked waits
      // for the region's I/O without the lock, and fork may come meanwhile).
      if (tier == Tier::kDisk) {
        Status read =
            store_->ReadInForkChild(rec.disk_slot, dst + off, rec.checksum, {r->region->id, p});
        if (!read.ok()) {
          // Never hand on bytes that may be wrong: the child stops.
          Log(0, "fork child: page %u of a tiered block at %p: %s; stopping the child", p,
              reinterpret_cast<void*>(base), read.message().c_str());
          _exit(70);
        }
      } else if (r->degraded || tier == Tier::kDevice || tier == Tier::kHost) {
        memcpy(dst + off, r->views.alias + off, page_size);
      }  // kUntouched: zeros, as the fresh mapping is
    }
    // The copy takes the engine view's place (and its address).
    if (mremap(copy, bytes, bytes, MREMAP_MAYMOVE | MREMAP_FIXED, r->views.engine) == MAP_FAILED) {
      Log(0,
          "fork child: cannot put the private copy of a tiered block at %p: %s; stopping the "
          "child",
          reinterpret_cast<void*>(base), strerror(errno));
      _exit(70);
    }
    munmap(r->views.alias, bytes);
    close(r->views.memfd);
    range_->AdoptPlainForkLocked(base, bytes);
  }
  if (store_) store_->CloseInForkChild();
}

Status MemfdDevice::Usable() const {
  if (forked_.load(std::memory_order_relaxed)) {
    return Status::Errorf("%s: unusable in a forked child (its fault threads stayed in the parent)",
                          who());
  }
  return Status::Ok();
}

Result<RegionPtr> MemfdDevice::CreateRegion(RegionId id, size_t bytes, size_t page_size,
                                            std::string tag) {
  if (Status s = Usable(); !s.ok()) return s;
  const size_t base_page = BasePageSize();
  if (!IsPowerOfTwo(page_size) || page_size < base_page) {
    return Status::Errorf("%s: page size %zu is not a power of two of at least %zu bytes", who(),
                          page_size, base_page);
  }
  if (page_size > capacity()) {
    return Status::Errorf(
        "%s: page size %zu exceeds the device capacity of %lu bytes (raise "
        "KVTIER_DEVICE_BUDGET or lower KVTIER_PAGE_SIZE)",
        who(), page_size, static_cast<unsigned long>(capacity()));
  }
  const size_t pages = bytes / page_size + (bytes % page_size != 0);
  if (bytes == 0 || pages > UINT32_MAX || pages > (SIZE_MAX - page_size) / page_size) {
    return Status::Errorf("%s: region %u of %zu bytes: size out of range", who(), id, bytes);
  }
  const size_t whole = pages * page_size;
  Result<ShmViews> views = ShmViews::Create(whole, page_size, "kvtier:" + tag, range_);
  if (!views.ok())
    return views.status().Annotate(std::string(who()) + ": region " + std::to_string(id));

  auto sim = std::make_unique<MemfdRegion>();
  sim->device = this;
  sim->views = views.value();
  const uintptr_t base = reinterpret_cast<uintptr_t>(sim->views.engine);
  auto region = std::make_shared<Region>(id, base, bytes, page_size, std::move(tag));
  sim->region = region;
  sim->links = std::make_unique<ResidentLink<MemfdRegion>[]>(pages);
  for (size_t i = 0; i < pages; ++i) {
    sim->links[i].owner = sim.get();
    sim->links[i].page = static_cast<uint32_t>(i);
  }
  bool protectable = false;
  if (Status s = uffd_.Register(base, whole, &sim->zeropage, &protectable); !s.ok()) {
    sim->views.Release();
    return s.Annotate(std::string(who()) + ": region " + std::to_string(id));
  }
  sim->protectable = protectable && write_protect_;
  MutexLock lock(&mu_);
  (*by_base_)[base] = sim.get();
  max_page_size_.store(std::max(max_page_size_.load(std::memory_order_relaxed), page_size),
                       std::memory_order_relaxed);
  region->backend = sim.release();
  return region;
}

void MemfdDevice::DestroyRegion(Region& region) {
  if (forked_.load()) return;
  MutexLock lock(&mu_);
  auto* r = static_cast<MemfdRegion*>(region.backend);
  if (r == nullptr || r->device != this || r->releasing) return;
  // A spill or restore of one of its pages is reading or writing its views:
  // let it finish (no new one starts on a releasing region).
  r->releasing = true;
  CancelRestoresLocked(r);
  while (r->disk_io != 0) disk_io_done_.Wait(mu_);
  ReleaseRegionLocked(r);
}

void MemfdDevice::ReleaseRegionLocked(MemfdRegion* r) {
  const RegionPtr region = r->region;  // may be the last reference
  for (uint32_t p = 0; p < region->pages.size(); ++p) {
    PageRecord& rec = region->pages[p];
    if (rec.tier.load(std::memory_order_relaxed) == Tier::kDisk) store_->Free(rec.disk_slot);
    DropCopyLocked(*r, p);
    SetTierLocked(*r, p, Tier::kUntouched);
  }
  region->backend = nullptr;
  // Wakes any thread still waiting on a fault here; it then faults normally.
  if (!r->degraded) {
    (void)uffd_.Unregister(reinterpret_cast<uintptr_t>(r->views.engine), r->views.bytes);
  }
  by_base_->erase(reinterpret_cast<uintptr_t>(r->views.engine));
  r->views.Release();
  delete r;
}

Result<MemfdRegion*> MemfdDevice::FindLocked(Region& region, uint32_t page) const {
  auto* r = static_cast<MemfdRegion*>(region.backend);
  if (r == nullptr || r->device != this) {
    return Status::Errorf("%s: region %u is not a live region of this device", who(), region.id);
  }
  if (r->degraded) {
    return Status::Errorf("%s: region %u is no longer tiered after an error", who(), region.id);
  }
  if (r->releasing) {
    return Status::Errorf("%s: region %u is being destroyed", who(), region.id);
  }
  if (page >= region.pages.size()) {
    return Status::Errorf("%s: page %u out of range (region %u has %zu pages)", who(), page,
                          region.id, region.pages.size());
  }
  return r;
}

MemfdRegion* MemfdDevice::FindByAddressLocked(uintptr_t addr) const {
  auto it = by_base_->upper_bound(addr);
  if (it == by_base_->begin()) return nullptr;
  --it;
  MemfdRegion* r = it->second;
  return addr - it->first < r->views.bytes ? r : nullptr;
}

uint8_t* MemfdDevice::AliasOf(const Region& region) const {
  MutexLock lock(&mu_);
  auto* r = static_cast<MemfdRegion*>(region.backend);
  return r && r->device == this ? r->views.alias : nullptr;
}

bool MemfdDevice::SetBudget(uint64_t capacity_bytes, uint64_t host_limit_bytes) {
  // A device without a staging limit has no disk tier to send pages to: its
  // residency could not follow a smaller budget.
  if (host_limit() == 0 || host_limit_bytes == 0 || capacity_bytes == 0) return false;
  MutexLock lock(&mu_);  // a fault that waits for staging room looks again at the new limit
  capacity_.store(capacity_bytes, std::memory_order_relaxed);
  host_limit_.store(host_limit_bytes, std::memory_order_relaxed);
  staging_room_.SignalAll();
  drain_work_.Signal();  // a smaller staging may be over its target now
  return true;
}

uint64_t MemfdDevice::resident_bytes() const {
  return resident_bytes_.load(std::memory_order_relaxed);
}

void MemfdDevice::DemotePages(std::span<const PageRef> pages, std::span<Status> results) {
  if (Status s = Usable(); !s.ok()) {
    for (Status& r : results) r = s;
    return;
  }
  std::vector<PageOf> zap;
  std::vector<PageOf> punch;  // leaving memory: punched with the lock released
  {
    MutexLock lock(&mu_);
    for (size_t i = 0; i < pages.size(); ++i) {
      Result<MemfdRegion*> r = FindLocked(*pages[i].region, pages[i].page);
      results[i] = r.status();
      if (!r.ok()) continue;
      if (pages[i].region->pages[pages[i].page].tier.load(std::memory_order_relaxed) !=
          Tier::kDevice) {
        continue;  // Ok and a no-op, as Demote
      }
      zap.push_back({r.value(), pages[i].page});
    }
    // One shootdown per run of neighbours (ZapRunsLocked sorts them).
    if (Status s = ZapRunsLocked(zap); !s.ok()) {
      for (Status& r : results) {
        if (r.ok()) r = s;
      }
      return;
    }
    LeaveDeviceLocked(zap, &punch);
    for (const PageOf& p : zap) {
      Counters::Add(counters_.demoted_pages);
      Counters::Add(counters_.demoted_bytes, p.r->region->page_size);
    }
  }
  if (!punch.empty()) PunchLeftPages(punch);
  WaitForDrain();
}

Status MemfdDevice::Demote(Region& region, uint32_t page) {
  if (Status s = Usable(); !s.ok()) return s;
  MutexLock lock(&mu_);
  Result<MemfdRegion*> r = FindLocked(region, page);
  if (!r.ok()) return r.status();
  if (region.pages[page].tier.load(std::memory_order_relaxed) != Tier::kDevice) {
    return Status::Ok();
  }
  if (Status s = ZapLocked(*r.value(), page); !s.ok()) return s;
  LeaveDeviceLocked({{r.value(), page}});
  Counters::Add(counters_.demoted_pages);
  Counters::Add(counters_.demoted_bytes, region.page_size);
  lock.Unlock();
  WaitForDrain();
  return Status::Ok();
}

void MemfdDevice::WaitForDrain() {
  // The host backend's budget is the engine's memory: the policy's moves
  // wait for their pages to go on to SSD (the engine does not). A spill
  // that fails leaves its page in memory, over the limit, and counted.
  if (has_drainer_) WaitForStagingRoom(FaultReserve(), /*engine_waits=*/false);
}

Status MemfdDevice::Promote(Region& region, uint32_t page) {
  if (Status s = Usable(); !s.ok()) return s;
  std::vector<Evicted> evicted;
  Status s;
  {
    MutexLock lock(&mu_);
    for (;;) {
      Result<MemfdRegion*> r = FindLocked(region, page);
      if (!r.ok()) return r.status();
      const PageRecord& rec = region.pages[page];
      const Tier tier = rec.tier.load(std::memory_order_relaxed);
      if (tier == Tier::kDevice) return Status::Ok();
      if (tier != Tier::kHost && (rec.flags.load(std::memory_order_relaxed) & kPageInFlight)) {
        // A fault is restoring it, or it is being punched out of the memfd
        // (PunchLeftPages): wait for that, then look again.
        disk_io_done_.Wait(mu_);
        continue;
      }
      if (tier != Tier::kDisk) {
        s = BringInLocked(*r.value(), page, &evicted);
      } else {
        s = RestoreLocked(*r.value(), page, &evicted);
      }
      break;
    }
    if (s.ok()) {
      Counters::Add(counters_.promoted_pages);
      Counters::Add(counters_.promoted_bytes, region.page_size);
    }
  }
  Report(evicted);
  if (!evicted.empty()) WaitForDrain();
  return s;
}

Status MemfdDevice::BringInLocked(MemfdRegion& r, uint32_t page, std::vector<Evicted>* evicted) {
  Region& region = *r.region;
  PageRecord& rec = region.pages[page];
  const Tier from = rec.tier.load(std::memory_order_relaxed);
  if (from == Tier::kDevice) return Status::Ok();
  if (from == Tier::kDisk) return Status::Error("internal: a spilled page needs RestoreLocked");
  if (Status s = MakeRoomLocked(region.page_size, evicted); !s.ok()) return s;
  // A spill is writing this host page: once it is back on the device the
  // engine may change it, so the spill must drop what it wrote.
  if (from == Tier::kHost && (rec.flags.load(std::memory_order_relaxed) & kPageInFlight)) {
    rec.flags.fetch_or(kPageTouchedDuringMove, std::memory_order_relaxed);
  }
  // Whole page, relative to the aligned base: a fault anywhere in it
  // brings all of it, as a UVM VA block does.
  const uintptr_t start = region.PageAddr(page);
  Status s =
      from == Tier::kHost ? uffd_.Continue(start, region.page_size) : FillUntouchedLocked(r, page);
  if (!s.ok()) {
    return s.Annotate(std::string(who()) + ": region " + std::to_string(region.id) + " page " +
                      std::to_string(page));
  }
  SetTierLocked(r, page, Tier::kDevice);
  return Status::Ok();
}

Status MemfdDevice::FillUntouchedLocked(MemfdRegion& r, uint32_t page) {
  const Region& region = *r.region;
  const uintptr_t start = region.PageAddr(page);
  const size_t len = region.page_size;
  if (r.zeropage && !copy_fill_) return uffd_.ZeroFill(start, len);
  if (zero_src_bytes_ < len) {
    if (zero_src_) munmap(zero_src_, zero_src_bytes_);
    // Never written: the kernel reads it as the shared zero page.
    void* z = mmap(nullptr, len, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    zero_src_ = z == MAP_FAILED ? nullptr : static_cast<uint8_t*>(z);
    zero_src_bytes_ = zero_src_ ? len : 0;
    if (!zero_src_) return Status::Errorf("mapping a zero page of %zu bytes failed", len);
  }
  return uffd_.Copy(start, len, zero_src_);
}

Status MemfdDevice::MakeRoomLocked(uint64_t bytes, std::vector<Evicted>* evicted) {
  // The victims first (oldest first), then their PTEs zapped in runs: one
  // TLB shootdown per run of neighbours, not one per page.
  std::vector<PageOf> victims;
  uint64_t freed = 0;
  const uint64_t resident = resident_bytes_.load(std::memory_order_relaxed) + installing_bytes_;
  for (ResidentLink<MemfdRegion>* l = resident_.Oldest(); resident - freed + bytes > capacity();
       l = resident_.Newer(l)) {
    if (l == nullptr) {
      return Status::Errorf("a page of %lu bytes does not fit in the capacity of %lu bytes",
                            static_cast<unsigned long>(bytes),
                            static_cast<unsigned long>(capacity()));
    }
    victims.push_back({l->owner, l->page});
    freed += l->owner->region->page_size;
  }
  if (victims.empty()) return Status::Ok();
  if (Status s = ZapRunsLocked(victims); !s.ok()) return s;
  LeaveDeviceLocked(victims);
  for (const PageOf& v : victims) {
    Counters::Add(counters_.driver_evictions);
    evicted->push_back({v.r->region, v.page});
  }
  return Status::Ok();
}

bool MemfdDevice::PageOrder(const PageOf& a, const PageOf& b) {
  return a.r != b.r ? a.r->region->id < b.r->region->id : a.page < b.page;
}

size_t MemfdDevice::RunEnd(const std::vector<PageOf>& pages, size_t i) {
  size_t j = i + 1;
  while (j < pages.size() && pages[j].r == pages[i].r && pages[j].page == pages[i].page + (j - i)) {
    ++j;
  }
  return j;
}

Status MemfdDevice::ZapRunsLocked(std::vector<PageOf>& pages) {
  std::sort(pages.begin(), pages.end(), PageOrder);
  for (size_t i = 0; i < pages.size();) {
    const size_t j = RunEnd(pages, i);
    const Region& region = *pages[i].r->region;
    if (madvise(reinterpret_cast<void*>(region.PageAddr(pages[i].page)), (j - i) * region.page_size,
                MADV_DONTNEED) != 0) {
      return Status::Errorf(
          "%s: MADV_DONTNEED of region %u pages %u..%zu failed: %s (is the memory "
          "locked with mlock?)",
          who(), region.id, pages[i].page, pages[i].page + (j - i) - 1, strerror(errno));
    }
    i = j;
  }
  return Status::Ok();
}

void MemfdDevice::LeaveDeviceLocked(const std::vector<PageOf>& pages, std::vector<PageOf>* punch) {
  if (host_limit() == 0 || store_ == nullptr) {
    for (const PageOf& p : pages) SetTierLocked(*p.r, p.page, Tier::kHost);
    return;
  }
  // The host backend's host tier only stages pages on their way to SSD: a
  // page of zeros is dropped (it reads back as zeros), a page whose copy on
  // SSD is current goes straight there (no write, no staging); both are
  // punched out of the memfd in runs.
  std::vector<PageOf> leave;
  std::vector<bool> zero;
  for (const PageOf& p : pages) {
    MemfdRegion& r = *p.r;
    const size_t len = r.region->page_size;
    const uint8_t* bytes = r.views.alias + uint64_t{p.page} * len;
    if (CopyKnownCurrent(r.region->pages[p.page])) {
      leave.push_back(p);
      zero.push_back(false);
      continue;
    }
    if (IsAllZero(bytes, len)) {
      leave.push_back(p);
      zero.push_back(true);
      continue;
    }
    if (CopyIsCurrent(*r.region, p.page, bytes)) {
      leave.push_back(p);
      zero.push_back(false);
      continue;
    }
    DropCopyLocked(r, p.page);  // changed since: its copy is stale
    SetTierLocked(r, p.page, Tier::kHost);
  }
  if (punch != nullptr) {
    // Booked where they go now; punched by the caller with the lock
    // released, in flight meanwhile (see PunchLeftPages).
    for (size_t i = 0; i < leave.size(); ++i) {
      MemfdRegion& r = *leave[i].r;
      if (zero[i]) {
        DroppedZeroPageLocked(r, leave[i].page);
      } else {
        LeftForCopyLocked(r, leave[i].page);
      }
      r.region->pages[leave[i].page].flags.fetch_or(kPageInFlight, std::memory_order_relaxed);
      ++r.disk_io;
    }
    punch->insert(punch->end(), leave.begin(), leave.end());
    return;
  }
  const std::vector<Status> punched = PunchRuns(leave);
  for (size_t i = 0; i < leave.size(); ++i) {
    MemfdRegion& r = *leave[i].r;
    const uint32_t page = leave[i].page;
    if (!punched[i].ok()) {
      SetTierLocked(r, page, Tier::kHost);  // staged, as a changed page
    } else if (zero[i]) {
      DroppedZeroPageLocked(r, page);
    } else {
      LeftForCopyLocked(r, page);
    }
  }
}

void MemfdDevice::PunchLeftPages(const std::vector<PageOf>& pages) {
  // Freeing the pages is most of a demotion's cost; the lock is free
  // meanwhile, for faults and the restore pipeline. A touch of one of them
  // waits (kDisk or kUntouched and in flight: HandleFault leaves it to the
  // wake below), as does a Promote; a restore does not pick it, a region's
  // release or degradation waits for its disk_io.
  const std::vector<Status> punched = PunchRuns(pages);
  MutexLock lock(&mu_);
  for (size_t i = 0; i < pages.size(); ++i) {
    MemfdRegion& r = *pages[i].r;
    const uint32_t page = pages[i].page;
    PageRecord& rec = r.region->pages[page];
    rec.flags.fetch_and(static_cast<uint8_t>(~kPageInFlight), std::memory_order_relaxed);
    if (!punched[i].ok()) {
      // Its bytes are still in the memfd: staged, as a changed page (a
      // page that left for its copy keeps the copy).
      if (rec.tier.load(std::memory_order_relaxed) == Tier::kDisk) {
        store_->KeepAsCopy(rec.disk_slot);
        rec.flags.fetch_or(kPageDiskCopy, std::memory_order_relaxed);
      }
      SetTierLocked(r, page, Tier::kHost);
    }
    waiting_.erase(r.region->PageAddr(page));
    EndDiskIoLocked(r);
  }
  for (size_t i = 0; i < pages.size();) {
    const size_t j = RunEnd(pages, i);
    const Region& region = *pages[i].r->region;
    uffd_.Wake(region.PageAddr(pages[i].page), (j - i) * region.page_size);
    i = j;
  }
}

Status MemfdDevice::ZapLocked(MemfdRegion& r, uint32_t page) {
  const Region& region = *r.region;
  // Zaps the engine view's PTEs only: the bytes stay in the memfd, and the
  // next touch raises a MINOR fault.
  if (madvise(reinterpret_cast<void*>(region.PageAddr(page)), region.page_size, MADV_DONTNEED) !=
      0) {
    return Status::Errorf(
        "%s: MADV_DONTNEED of region %u page %u failed: %s (is the memory locked "
        "with mlock?)",
        who(), region.id, page, strerror(errno));
  }
  return Status::Ok();
}

void MemfdDevice::Stage(MemfdRegion& r, uint32_t page) {
  staged_.PushNewest(&r.links[page], r.region->page_size);
  staged_bytes_.store(staged_.bytes(), std::memory_order_relaxed);
}

void MemfdDevice::Unstage(MemfdRegion& r, uint32_t page) {
  if (!r.links[page].linked()) return;
  staged_.Remove(&r.links[page], r.region->page_size);
  staged_bytes_.store(staged_.bytes(), std::memory_order_relaxed);
}

void MemfdDevice::SetTierLocked(MemfdRegion& r, uint32_t page, Tier to) {
  PageRecord& rec = r.region->pages[page];
  if ((rec.backend & kParkedAhead) && to != Tier::kDevice) {
    // A region going away or untiered says nothing of the read-ahead.
    LeftParkedLocked(rec, /*learn=*/!r.releasing && !r.degraded);
  }
  if (to == Tier::kDevice && rec.tier.load(std::memory_order_relaxed) != to) {
    // Mapped by an install that did not write-protect it (those that do set
    // the flag again after this).
    rec.flags.fetch_and(static_cast<uint8_t>(~kPageUnwritten), std::memory_order_relaxed);
  }
  const uint64_t len = r.region->page_size;
  // Off the staged list first: MoveTier may put the same link on resident_.
  // (A host page's link is on staged_ or on no list: a degraded region's
  // pages stay in memory untiered, not staged.)
  const bool was_host = rec.tier.load(std::memory_order_relaxed) == Tier::kHost;
  if (was_host && to != Tier::kHost) Unstage(r, page);
  const Tier from = MoveTier(rec, r.links[page], len, to, resident_, resident_bytes_, counters_);
  if (to == Tier::kHost && !was_host && !r.degraded) {
    Stage(r, page);
    if (has_drainer_ && StagingOverTargetLocked()) drain_work_.Signal();
  }
  if (from == Tier::kHost && to != from && host_limit() != 0) staging_room_.SignalAll();
}

void MemfdDevice::DegradeLocked(MemfdRegion& r, const Status& why) {
  if (r.degraded) return;
  r.degraded = true;  // no new spill or restore starts here
  CancelRestoresLocked(&r);
  // The engine must find every byte in the memfd once the view is
  // unregistered: let spills and restores in flight end (a restore then
  // copies its page into the memfd), and read the spilled pages back.
  // Counting this as I/O keeps DestroyRegion off the region meanwhile.
  ++r.disk_io;
  while (r.disk_io != 1) disk_io_done_.Wait(mu_);
  ReadBackSpilledLocked(r);
  r.region->untracked.store(true, std::memory_order_release);  // before any untracked write
  (void)uffd_.Unregister(reinterpret_cast<uintptr_t>(r.views.engine), r.views.bytes);
  // Its resident pages leave the device's books (they now count as host
  // memory), so the budget stays true for the regions still tiered.
  for (uint32_t p = 0; p < r.region->pages.size(); ++p) {
    const Tier tier = r.region->pages[p].tier.load(std::memory_order_relaxed);
    if (tier == Tier::kDevice) SetTierLocked(r, p, Tier::kHost);
    if (tier == Tier::kHost) Unstage(r, p);  // no longer the drain's to write
  }
  Log(0,
      "%s: region %u (%s): %s; the region is no longer tiered (its pages stay in "
      "memory and the device budget no longer covers them)",
      who(), r.region->id, r.region->tag.c_str(), why.message().c_str());
  EndDiskIoLocked(r);
}

void MemfdDevice::Report(const std::vector<Evicted>& evicted) {
  if (events_ == nullptr) return;
  for (const Evicted& e : evicted) {
    if (e.region) events_->OnDriverEviction(*e.region, e.page);
  }
}

}  // namespace kvtier
