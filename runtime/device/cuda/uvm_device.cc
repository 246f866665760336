// UvmDevice: regions, moves and the budget (see uvm_device.h; the CUPTI
// evidence and the maintenance thread are in uvm_evidence.cc).
#include "runtime/device/cuda/uvm_device.h"

#include <string>

#include "runtime/clock.h"
#include "runtime/device/cuda/uvm_region.h"
#include "runtime/internal_thread.h"
#include "runtime/log.h"
#include "runtime/units.h"

namespace kvtier::cuda {

namespace {

constexpr uint64_t kFreeMemoryRecheckNs = 50'000'000;

}  // namespace

Result<std::unique_ptr<UvmDevice>> UvmDevice::Create(UvmDeviceConfig config) {
  if (config.store != nullptr && config.api.cuMemDiscardBatchAsync == nullptr) {
    Log(0,
        "KVTIER_DISK_BUDGET: no disk tier on this GPU: the CUDA driver has no "
        "cuMemDiscardBatchAsync (CUDA 13 drivers have it), so a spilled page's memory could not "
        "be freed; pages stay in device and host memory");
    config.store = nullptr;
  }
  std::unique_ptr<UvmDevice> dev(new UvmDevice(std::move(config)));
  {
    MutexLock lock(&dev->mu_);
    Result<DeviceState*> first = dev->DeviceLocked(dev->config_.device);
    if (!first.ok()) return first.status();
  }
  if (dev->store_ != nullptr) {
    switch (dev->config_.watch) {
      case UvmDeviceConfig::Watch::kNone:
        break;
      case UvmDeviceConfig::Watch::kCaller:
        dev->gating_ = true;
        break;
      case UvmDeviceConfig::Watch::kCupti: {
        Result<std::unique_ptr<SubmitWatch>> watch = StartCuptiSubmitWatch(dev.get());
        if (watch.ok()) {
          dev->watch_ = std::move(watch).value();
          dev->gating_ = true;
        } else {
          Log(0,
              "CUDA disk tier: %s; only ranges an engine hints KVTIER_HINT_DORMANT go to SSD, "
              "and waking one brings it back at once",
              watch.status().message().c_str());
        }
        break;
      }
    }
  }
  UvmDevice* raw = dev.get();
  dev->maintenance_ = std::make_unique<std::thread>([raw] {
    MarkKvtierThread();
    raw->MaintenanceLoop();
  });
  return dev;
}

Result<UvmDevice::DeviceState*> UvmDevice::DeviceLocked(CUdevice device) {
  if (device < 0 || device >= kMaxDevices) {
    return Status::Errorf("CUDA backend: device %d is beyond the %d it supports",
                          static_cast<int>(device), kMaxDevices);
  }
  DeviceState& state = devices_[device];
  if (state.ready) return &state;
  const DriverApi& api = config_.api;
  int concurrent = 1;
  if (device != config_.device && api.cuDeviceGetAttribute != nullptr &&
      (api.cuDeviceGetAttribute(&concurrent, CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS,
                                device) != CUDA_SUCCESS ||
       concurrent == 0)) {
    return Status::Errorf(
        "CUDA backend: GPU %d has no concurrent managed memory access; its allocations are not "
        "tiered",
        static_cast<int>(device));
  }
  CUcontext context = nullptr;
  CUresult r = CUDA_SUCCESS;
  if (device == config_.device) {
    context = config_.context;  // retained by MakeCudaDevice, released by us
  } else if (config_.context != nullptr &&
             (r = api.cuDevicePrimaryCtxRetain(&context, device)) != CUDA_SUCCESS) {
    return Status::Errorf("CUDA backend: cannot retain the primary context of GPU %d (%s)",
                          static_cast<int>(device), api.ErrorName(r));
  }
  ScopedContext ctx(api, context);
  int least = 0, greatest = 0;
  // The numerically greatest priority is the lowest: migrations yield to
  // the engine's kernels and copies.
  if (api.cuCtxGetStreamPriorityRange(&least, &greatest) != CUDA_SUCCESS) least = 0;
  CUstream stream = nullptr;
  r = api.cuStreamCreateWithPriority(&stream, CU_STREAM_NON_BLOCKING, least);
  Status sized;
  if (r != CUDA_SUCCESS) {
    sized = Status::Errorf("CUDA backend: cannot create a migration stream on GPU %d (%s)",
                           static_cast<int>(device), api.ErrorName(r));
  } else {
    state.context = context;
    sized = SizeBudgetLocked(device, state);
    if (!sized.ok() && api.cuStreamDestroy) api.cuStreamDestroy(stream);
  }
  if (!sized.ok()) {
    state.context = nullptr;
    if (context != nullptr && device != config_.device) api.cuDevicePrimaryCtxRelease(device);
    return sized;
  }
  state.ready = true;
  state.stream = stream;
  capacity_bytes_.fetch_add(state.capacity, std::memory_order_relaxed);
  Counters::Set(counters_.device_budget_bytes, capacity_bytes_.load(std::memory_order_relaxed));
  return &state;
}

Status UvmDevice::SizeBudgetLocked(CUdevice device, DeviceState& state) {
  const DriverApi& api = config_.api;
  size_t free_bytes = 0, total = 0;
  CUresult r;
  {
    ScopedContext ctx(api, state.context);
    r = ctx.result();
    if (r == CUDA_SUCCESS) r = api.cuMemGetInfo(&free_bytes, &total);
  }
  if (r != CUDA_SUCCESS || free_bytes == 0) {
    return Status::Errorf("GPU %d: cannot read its free memory (%s)", static_cast<int>(device),
                          api.ErrorName(r));
  }
  const uint64_t asked = config_.budget.For(device);
  uint64_t capacity = asked ? asked : free_bytes / 10 * 9;
  if (capacity > free_bytes) {
    Log(0, "KVTIER_DEVICE_BUDGET=%s is more than the %s free on GPU %d at start; using %s",
        FormatBytes(asked).c_str(), FormatBytes(free_bytes).c_str(), static_cast<int>(device),
        FormatBytes(free_bytes).c_str());
    capacity = free_bytes;
  }
  capacity = capacity / config_.page_size * config_.page_size;
  if (capacity == 0) {
    return Status::Errorf("GPU %d: a device budget of less than one page (%s free)",
                          static_cast<int>(device), FormatBytes(free_bytes).c_str());
  }
  state.capacity = capacity;
  Log(1, "CUDA backend on GPU %d: %s free of %s, device budget %s", static_cast<int>(device),
      FormatBytes(free_bytes).c_str(), FormatBytes(total).c_str(), FormatBytes(capacity).c_str());
  return Status::Ok();
}

UvmDevice::UvmDevice(UvmDeviceConfig config)
    : config_(std::move(config)),
      counters_(config_.counters ? *config_.counters : own_counters_),
      store_(config_.store),
      scratch_(RestoreBuffers(config_.page_size), "CUDA backend"),
      copies_(store_ != nullptr && std::thread::hardware_concurrency() > 1, "kvtier-uvm-copy"),
      page_io_(config_.store) {}

UvmDevice::~UvmDevice() {
  if (forked_.load()) {
    // The parent's thread, stream and memory are not this process's to free.
    (void)maintenance_.release();
    (void)watch_.release();
    copies_.AbandonInForkChild();
    return;
  }
  watch_.reset();  // no submission reaches the gate from here on
  {
    MutexLock lock(&stop_mu_);
    stopping_ = true;
  }
  stop_cv_.SignalAll();
  if (maintenance_ && maintenance_->joinable()) maintenance_->join();
  delete cupti_.exchange(nullptr);
  std::vector<UvmRegion*> left;
  {
    MutexLock lock(&mu_);
    for (auto& [base, r] : by_base_) left.push_back(r);
  }
  for (UvmRegion* r : left) DestroyRegion(*r->region);
  for (int d = 0; d < kMaxDevices; ++d) {
    DeviceState& state = devices_[d];
    if (!state.ready) continue;
    {
      ScopedContext ctx(config_.api, state.context);
      if (config_.api.cuStreamDestroy) config_.api.cuStreamDestroy(state.stream);
    }
    if (state.context != nullptr) config_.api.cuDevicePrimaryCtxRelease(d);
  }
}

Status UvmDevice::Usable() const {
  if (forked_.load(std::memory_order_relaxed)) {
    return Status::Error(
        "CUDA backend: this is a fork child; the parent's CUDA context cannot be used here");
  }
  return Status::Ok();
}

void UvmDevice::AfterForkInChild() {
  forked_.store(true);
  copies_.AbandonInForkChild();  // its helper is not in this process
}

uint64_t UvmDevice::resident_bytes() const {
  return resident_bytes_.load(std::memory_order_relaxed);
}

uint64_t UvmDevice::capacity_bytes() const {
  return capacity_bytes_.load(std::memory_order_relaxed);
}

std::vector<Device::GpuUsage> UvmDevice::gpus() const {
  std::vector<GpuUsage> out;
  MutexLock lock(&mu_);
  for (int d = 0; d < kMaxDevices; ++d) {
    if (devices_[d].ready)
      out.push_back({d, devices_[d].resident_list.bytes(), devices_[d].capacity});
  }
  return out;
}

void UvmDevice::StartCupti() {
  if (!config_.use_cupti) return;
  auto source = CuptiSource::Start(this);
  if (!source.ok()) {
    Log(1, "CUDA backend: %s; tiering continues on launches and hints",
        source.status().message().c_str());
    return;
  }
  cupti_.store(source.value().release(), std::memory_order_release);
  Log(1, "CUDA backend: observing GPU page faults through CUPTI");
}

Result<RegionPtr> UvmDevice::CreateRegion(RegionId id, size_t bytes, size_t page_size,
                                          std::string tag) {
  BackendScope scope;
  if (Status s = Usable(); !s.ok()) return s;
  if (store_ != nullptr && page_size != store_->page_size()) {
    return Status::Errorf(
        "CUDA backend: %zu-byte pages, but the disk tier's slots are %zu bytes (use one "
        "KVTIER_PAGE_SIZE for both)",
        page_size, store_->page_size());
  }
  if (bytes == 0 || page_size == 0) return Status::Error("CUDA backend: empty region");
  // CUPTI starts with the first region, outside the runtime's start-up (its
  // initialisation calls into the driver and may start threads).
  std::call_once(cupti_once_, [this] { StartCupti(); });
  const uint64_t rounded = (uint64_t{bytes} + page_size - 1) / page_size * page_size;
  // The engine's GPU: the one whose context is current on this thread.
  CUdevice device = config_.device;
  if (config_.api.cuCtxGetDevice == nullptr ||
      config_.api.cuCtxGetDevice(&device) != CUDA_SUCCESS) {
    device = config_.device;
  }
  CUcontext context = nullptr;
  {
    MutexLock lock(&mu_);
    Result<DeviceState*> state = DeviceLocked(device);
    if (!state.ok()) return state.status();
    context = state.value()->context;
  }
  CUdeviceptr ptr = 0;
  {
    ScopedContext ctx(config_.api, context);
    CUresult r = config_.api.cuMemAllocManaged(&ptr, rounded, CU_MEM_ATTACH_GLOBAL);
    if (r != CUDA_SUCCESS) {
      return Status::Errorf("CUDA backend: cuMemAllocManaged(%llu bytes) failed: %s",
                            static_cast<unsigned long long>(rounded), config_.api.ErrorName(r));
    }
  }
  auto region =
      std::make_shared<Region>(id, static_cast<uintptr_t>(ptr), bytes, page_size, std::move(tag));
  auto* r = new UvmRegion{region, device, std::make_unique<Link[]>(region->pages.size())};
  for (uint32_t p = 0; p < region->pages.size(); ++p) r->links[p] = Link{nullptr, nullptr, r, p};
  region->backend = r;
  if (store_ != nullptr) region->spill_gate = &sealed_;
  MutexLock lock(&mu_);
  by_base_[region->base] = r;
  return RegionPtr(region);
}

void UvmDevice::DestroyRegion(Region& region) {
  BackendScope scope;
  auto* r = static_cast<UvmRegion*>(region.backend);
  if (r == nullptr) return;
  RegionPtr keep = r->region;  // the caller's reference may be the last
  CUcontext context = nullptr;
  {
    MutexLock lock(&mu_);
    auto it = by_base_.find(region.base);
    if (it == by_base_.end() || it->second != r) return;
    r->releasing = true;  // no new spill starts; the ones in flight end first
    while (r->disk_io > 0) disk_io_done_.Wait(mu_);
    by_base_.erase(it);
    for (uint32_t p = 0; p < region.pages.size(); ++p) {
      const PageRecord& rec = region.pages[p];
      if (rec.tier.load(std::memory_order_relaxed) != Tier::kDisk) continue;
      if (rec.disk_slot != kZeroSlot) store_->Free(rec.disk_slot);
      pending_.erase({r, p});
    }
    UpdateClosedLocked();
    DeviceState& dev = devices_[r->device];
    context = dev.context;
    for (uint32_t p = 0; p < region.pages.size(); ++p) {
      DropFromBooks(region.pages[p], r->links[p], region.page_size, dev.resident_list,
                    resident_bytes_, counters_);
    }
  }
  region.backend = nullptr;
  if (!forked_.load()) {
    ScopedContext ctx(config_.api, context);
    // cuMemFree waits for work still using the memory.
    CUresult res = config_.api.cuMemFree(static_cast<CUdeviceptr>(region.base));
    if (res != CUDA_SUCCESS) {
      Log(0, "CUDA backend: freeing region %u failed: %s", region.id, config_.api.ErrorName(res));
    }
  }
  delete r;
}

Result<UvmRegion*> UvmDevice::FindLocked(const Region& region, uint32_t page) const {
  auto* r = static_cast<UvmRegion*>(region.backend);
  auto it = by_base_.find(region.base);
  if (r == nullptr || it == by_base_.end() || it->second != r) {
    return Status::Errorf("CUDA backend: region %u is not one of this device's", region.id);
  }
  if (page >= region.pages.size()) {
    return Status::Errorf("CUDA backend: region %u has no page %u", region.id, page);
  }
  return r;
}

UvmRegion* UvmDevice::FindByAddressLocked(uintptr_t addr) const {
  auto it = by_base_.upper_bound(addr);
  if (it == by_base_.begin()) return nullptr;
  --it;
  const Region& region = *it->second->region;
  return addr - it->first < region.pages.size() * region.page_size ? it->second : nullptr;
}

Status UvmDevice::MoveLocked(UvmRegion& r, uint32_t page, bool to_host) {
  const Region& region = *r.region;
  const CUdeviceptr at = static_cast<CUdeviceptr>(region.PageAddr(page));
  const DriverApi& api = config_.api;
  const DeviceState& dev = devices_[r.device];  // ready since the region's creation
  ScopedContext ctx(api, dev.context);
  // Preferred location device while kvtier wants the page there (the driver
  // migrates it back after a CPU touch); none once demoted, so that a GPU
  // touch migrates it back instead of reading host memory remotely.
  CUresult res =
      to_host ? api.PreferLocation(at, region.page_size, false, false, r.device) : CUDA_SUCCESS;
  if (res == CUDA_SUCCESS) res = api.Prefetch(at, region.page_size, to_host, r.device, dev.stream);
  if (res == CUDA_SUCCESS) res = api.cuStreamSynchronize(dev.stream);
  if (res == CUDA_SUCCESS && !to_host) {
    res = api.PreferLocation(at, region.page_size, true, false, r.device);
  }
  if (res != CUDA_SUCCESS) {
    return Status::Errorf("CUDA backend: moving page %u of region %u to the %s failed: %s", page,
                          region.id, to_host ? "host" : "device", api.ErrorName(res));
  }
  return Status::Ok();
}

Status UvmDevice::Demote(Region& region, uint32_t page) {
  BackendScope scope;
  if (Status s = Usable(); !s.ok()) return s;
  MutexLock lock(&mu_);
  Result<UvmRegion*> r = FindLocked(region, page);
  if (!r.ok()) return r.status();
  if (region.pages[page].tier.load(std::memory_order_relaxed) != Tier::kDevice) return Status::Ok();
  if (Status s = MoveLocked(*r.value(), page, /*to_host=*/true); !s.ok()) return s;
  SetTierLocked(*r.value(), page, Tier::kHost);
  Counters::Add(counters_.demoted_pages);
  Counters::Add(counters_.demoted_bytes, region.page_size);
  return Status::Ok();
}

Status UvmDevice::Promote(Region& region, uint32_t page) {
  BackendScope scope;
  if (Status s = Usable(); !s.ok()) return s;
  std::vector<Evicted> evicted;
  Status status;
  {
    MutexLock lock(&mu_);
    Result<UvmRegion*> r = FindLocked(region, page);
    if (!r.ok()) return r.status();
    if (store_ != nullptr) RestoreRangeLocked(*r.value(), page, 1);  // from disk: host first
    if (region.pages[page].tier.load(std::memory_order_relaxed) == Tier::kDevice) {
      return Status::Ok();
    }
    status = MakeRoomLocked(r.value()->device, region.page_size, &evicted);
    if (status.ok()) status = CheckFreeMemoryLocked(r.value()->device, region.page_size);
    if (status.ok()) status = MoveLocked(*r.value(), page, /*to_host=*/false);
    if (status.ok()) {
      SetTierLocked(*r.value(), page, Tier::kDevice);
      Counters::Add(counters_.promoted_pages);
      Counters::Add(counters_.promoted_bytes, region.page_size);
    }
  }
  Report(evicted, {});
  return status;
}

Status UvmDevice::MakeRoomLocked(CUdevice device, uint64_t bytes, std::vector<Evicted>* evicted) {
  DeviceState& dev = devices_[device];
  ResidentList<UvmRegion>& list = dev.resident_list;
  while (list.bytes() + bytes > dev.capacity) {
    if (list.empty()) {
      return Status::Errorf(
          "CUDA backend: a page of %llu bytes does not fit in GPU %d's budget of %llu bytes",
          static_cast<unsigned long long>(bytes), static_cast<int>(device),
          static_cast<unsigned long long>(dev.capacity));
    }
    Link* victim = list.Oldest();
    UvmRegion& vr = *victim->owner;
    const uint32_t vp = victim->page;
    if (Status s = MoveLocked(vr, vp, /*to_host=*/true); !s.ok()) return s;
    SetTierLocked(vr, vp, Tier::kHost);
    Counters::Add(counters_.driver_evictions);
    evicted->push_back({vr.region, vp});
  }
  return Status::Ok();
}

Status UvmDevice::CheckFreeMemoryLocked(CUdevice device, uint64_t bytes) {
  DeviceState& dev = devices_[device];
  const uint64_t now = MonotonicNs();
  if (dev.free_checked_ns == 0 || now - dev.free_checked_ns > kFreeMemoryRecheckNs) {
    size_t free_bytes = 0, total = 0;
    ScopedContext ctx(config_.api, dev.context);
    if (config_.api.cuMemGetInfo(&free_bytes, &total) != CUDA_SUCCESS) return Status::Ok();
    dev.free_bytes = free_bytes;
    dev.free_checked_ns = now;
  }
  if (dev.free_bytes < bytes + config_.headroom_bytes) {
    return Status::Errorf(
        "CUDA backend: GPU %d has %s free, less than a page plus the %s kept free for the "
        "engine; not promoting (lower KVTIER_DEVICE_BUDGET if this persists)",
        static_cast<int>(device), FormatBytes(dev.free_bytes).c_str(),
        FormatBytes(config_.headroom_bytes).c_str());
  }
  dev.free_bytes -= bytes;  // until the next check
  return Status::Ok();
}

void UvmDevice::SetTierLocked(UvmRegion& r, uint32_t page, Tier to) {
  MoveTier(r.region->pages[page], r.links[page], r.region->page_size, to,
           devices_[r.device].resident_list, resident_bytes_, counters_);
}

}  // namespace kvtier::cuda
