// ModelDevice: page states, channels and a virtual clock (see model_device.h).
#include "tools/bench/model_device.h"

#include <algorithm>
#include <cmath>

namespace kvtier {
namespace {

uint64_t Duration(uint64_t bytes, double bps) {
  if (bps <= 0) return 0;
  return static_cast<uint64_t>(std::llround(static_cast<double>(bytes) * 1e9 / bps));
}

void SetInFlight(PageRecord& rec, bool on) {
  if (on) {
    rec.flags.fetch_or(kPageInFlight, std::memory_order_relaxed);
  } else {
    rec.flags.fetch_and(static_cast<uint8_t>(~kPageInFlight), std::memory_order_relaxed);
  }
}

}  // namespace

ModelDevice::ModelDevice(const ModelCosts& costs, DeviceEvents* events)
    : costs_(costs), events_(events) {}

ModelDevice::~ModelDevice() = default;

Result<RegionPtr> ModelDevice::CreateRegion(RegionId id, size_t bytes, size_t page_size,
                                            std::string tag) {
  if (bytes == 0 || page_size == 0 || (page_size & (page_size - 1)) != 0) {
    return Status::Errorf(
        "model device: region of %zu bytes with page size %zu (need bytes > 0 "
        "and a power-of-two page size)",
        bytes, page_size);
  }
  MutexLock lock(&mu_);
  if (regions_.count(id)) return Status::Errorf("model device: region id %u exists already", id);
  // Managed allocations start on a VA block boundary (or a page, if larger).
  const uint64_t block = costs_.fault_block_bytes;
  const uintptr_t align = block > page_size && (block & (block - 1)) == 0 ? block : page_size;
  uintptr_t base = (next_base_ + align - 1) & ~(align - 1);
  next_base_ = base + ((bytes + page_size - 1) / page_size + 1) * page_size;
  auto region = std::make_shared<Region>(id, base, bytes, page_size, std::move(tag));
  RegionState& rs = regions_[id];
  rs.region = region.get();
  rs.pages.resize(region->pages.size());
  region->backend = &rs;
  return region;
}

void ModelDevice::DestroyRegion(Region& region) {
  MutexLock lock(&mu_);
  auto it = regions_.find(region.id);
  if (it == regions_.end()) return;
  for (uint32_t p = 0; p < region.pages.size(); ++p) {
    const uint64_t b = region.PageBytes(p);
    const PageState& ps = it->second.pages[p];
    switch (region.pages[p].tier.load(std::memory_order_relaxed)) {
      case Tier::kDevice:
        occupied_ -= b;
        if (ps.op == Op::kDown) leaving_ -= b;
        break;
      case Tier::kHost:
        if (ps.op == Op::kUp) occupied_ -= b;  // its frame was reserved
        host_used_ -= b;
        break;
      case Tier::kDisk:
        if (ps.op == Op::kUp) occupied_ -= b;
        disk_used_ -= b;
        break;
      case Tier::kUntouched:
        break;
    }
  }
  region.backend = nullptr;
  regions_.erase(it);  // queued transfers of the region become stale
}

ModelDevice::RegionState* ModelDevice::StateOf(RegionId id) {
  auto it = regions_.find(id);
  return it == regions_.end() ? nullptr : &it->second;
}

uint64_t ModelDevice::Transfer(uint64_t* channel_free, uint64_t start, uint64_t bytes, double bps,
                               uint64_t latency_ns) {
  uint64_t s = std::max(start, *channel_free);
  uint64_t e = s + latency_ns + Duration(bytes, bps);
  *channel_free = e;
  return e;
}

uint64_t ModelDevice::SsdLatency(uint64_t bytes) const {
  if (costs_.ssd_io_bytes == 0) return costs_.ssd_latency_ns;
  return static_cast<uint64_t>(static_cast<double>(costs_.ssd_latency_ns) * bytes /
                               costs_.ssd_io_bytes);
}

uint64_t ModelDevice::ReadFromDisk(uint64_t t, uint64_t bytes) {
  stats_.disk_read_bytes += bytes;
  return Transfer(&ssd_free_, t, bytes, costs_.ssd_read_bps, SsdLatency(bytes));
}

void ModelDevice::NoteArrival(RegionState& rs, uint32_t page) {
  PageState& ps = rs.pages[page];
  ++ps.stamp;
  lrm_.push_back({rs.region->id, page, ps.stamp});
  // Drop stale entries now and then so the queue stays proportional to the
  // device (arrivals far outnumber evictions when a policy demotes).
  const size_t page_size = rs.region->page_size;
  const size_t resident_pages = occupied_ / page_size + 1;
  if (lrm_.size() > 4 * resident_pages + 4096) {
    std::deque<Lrm> kept;
    for (const Lrm& e : lrm_) {
      RegionState* s = StateOf(e.region);
      if (s && s->pages[e.page].stamp == e.stamp) kept.push_back(e);
    }
    lrm_.swap(kept);
  }
}

uint64_t ModelDevice::AcquireFrame(uint64_t t, uint64_t bytes, std::vector<Event>* events) {
  uint64_t ready = t;
  // A demotion in progress frees its frame when its copy ends.
  while (occupied_ + bytes > costs_.device_bytes && !down_.empty()) {
    Pending p = down_.front();
    down_.pop_front();
    RegionState* rs = StateOf(p.region);
    if (!rs || rs->pages[p.page].stamp != p.stamp || rs->pages[p.page].op != Op::kDown) continue;
    CompleteDown(p);
    ready = std::max(ready, p.end_ns);
  }
  // None left: the driver evicts the least recently migrated page itself.
  while (occupied_ + bytes > costs_.device_bytes && !lrm_.empty()) {
    Lrm e = lrm_.front();
    lrm_.pop_front();
    RegionState* rs = StateOf(e.region);
    if (!rs) continue;
    PageState& ps = rs->pages[e.page];
    PageRecord& rec = rs->region->pages[e.page];
    if (ps.stamp != e.stamp || ps.op != Op::kNone ||
        rec.tier.load(std::memory_order_relaxed) != Tier::kDevice) {
      continue;
    }
    const uint64_t vb = rs->region->PageBytes(e.page);
    uint64_t end = Transfer(&d2h_free_, t, vb, costs_.d2h_bps, 0);
    ps.ready_ns = end;  // the data is on the host from then on
    ++ps.stamp;
    rec.tier.store(Tier::kHost, std::memory_order_relaxed);
    occupied_ -= vb;
    host_used_ += vb;
    stats_.host_peak_bytes = std::max(stats_.host_peak_bytes, host_used_);
    ++epoch_;
    stats_.d2h_evict_bytes += vb;
    ++stats_.driver_evictions;
    events->push_back({true, rs->region, e.page, Tier::kDevice, 0});
    ready = std::max(ready, end);
  }
  occupied_ += bytes;  // over budget only when nothing at all could leave
  return ready;
}

void ModelDevice::CompleteUp(const Pending& p) {
  RegionState* rs = StateOf(p.region);
  if (!rs) return;
  PageState& ps = rs->pages[p.page];
  if (ps.stamp != p.stamp || ps.op != Op::kUp) return;
  PageRecord& rec = rs->region->pages[p.page];
  ps.op = Op::kNone;
  rec.tier.store(Tier::kDevice, std::memory_order_relaxed);
  SetInFlight(rec, false);
  NoteArrival(*rs, p.page);
}

void ModelDevice::CompleteDown(const Pending& p) {
  RegionState* rs = StateOf(p.region);
  if (!rs) return;
  PageState& ps = rs->pages[p.page];
  if (ps.stamp != p.stamp || ps.op != Op::kDown) return;
  PageRecord& rec = rs->region->pages[p.page];
  const uint64_t b = rs->region->PageBytes(p.page);
  ps.op = Op::kNone;
  rec.tier.store(Tier::kHost, std::memory_order_relaxed);
  SetInFlight(rec, false);
  occupied_ -= b;
  leaving_ -= b;
  host_used_ += b;
  stats_.host_peak_bytes = std::max(stats_.host_peak_bytes, host_used_);
}

void ModelDevice::CompleteSpill(const Pending& p) {
  RegionState* rs = StateOf(p.region);
  if (!rs) return;
  PageState& ps = rs->pages[p.page];
  if (ps.stamp != p.stamp || ps.op != Op::kSpill) return;
  PageRecord& rec = rs->region->pages[p.page];
  const uint64_t b = rs->region->PageBytes(p.page);
  ps.op = Op::kNone;
  rec.tier.store(Tier::kDisk, std::memory_order_relaxed);
  SetInFlight(rec, false);
  host_used_ -= b;
  disk_used_ += b;
}

void ModelDevice::AdvanceLocked(uint64_t t) {
  now_ = std::max(now_, t);
  while (!up_.empty() && up_.front().end_ns <= now_) {
    CompleteUp(up_.front());
    up_.pop_front();
  }
  while (!down_.empty() && down_.front().end_ns <= now_) {
    CompleteDown(down_.front());
    down_.pop_front();
  }
  while (!spill_.empty() && spill_.front().end_ns <= now_) {
    CompleteSpill(spill_.front());
    spill_.pop_front();
  }
}

void ModelDevice::AdvanceTo(uint64_t t_ns) {
  MutexLock lock(&mu_);
  AdvanceLocked(t_ns);
}

Status ModelDevice::Demote(Region& region, uint32_t page) {
  MutexLock lock(&mu_);
  RegionState* rs = StateOf(region.id);
  if (!rs || page >= region.pages.size()) {
    return Status::Errorf("model device: demote of page %u of unknown region %u", page, region.id);
  }
  PageState& ps = rs->pages[page];
  PageRecord& rec = region.pages[page];
  if (rec.tier.load(std::memory_order_relaxed) != Tier::kDevice || ps.op != Op::kNone) {
    return Status::Ok();
  }
  const uint64_t b = region.PageBytes(page);
  uint64_t end = Transfer(&d2h_free_, now_, b, costs_.d2h_bps, 0);
  ps.op = Op::kDown;
  ps.ready_ns = end;
  ++ps.stamp;
  down_.push_back({region.id, page, ps.stamp, end});
  SetInFlight(rec, true);
  leaving_ += b;
  ++epoch_;
  stats_.d2h_demote_bytes += b;
  return Status::Ok();
}

Status ModelDevice::Promote(Region& region, uint32_t page) {
  std::vector<Event> events;
  {
    MutexLock lock(&mu_);
    RegionState* rs = StateOf(region.id);
    if (!rs || page >= region.pages.size()) {
      return Status::Errorf("model device: promote of page %u of unknown region %u", page,
                            region.id);
    }
    PromoteLocked(*rs, page, &events);
  }
  Notify(events);
  return Status::Ok();
}

void ModelDevice::PromoteLocked(RegionState& rs, uint32_t page, std::vector<Event>* events) {
  Region& region = *rs.region;
  PageState& ps = rs.pages[page];
  PageRecord& rec = region.pages[page];
  const uint64_t b = region.PageBytes(page);
  if (ps.op == Op::kUp) return;
  if (ps.op == Op::kDown) {  // still on the device: keep it there
    ps.op = Op::kNone;
    SetInFlight(rec, false);
    leaving_ -= b;
    ++stats_.aborted_demotions;
    NoteArrival(rs, page);
    return;
  }
  const Tier tier = rec.tier.load(std::memory_order_relaxed);
  if (tier == Tier::kDevice) return;
  if (tier == Tier::kUntouched) {
    // Prefetching never-touched managed memory populates it on the device: a
    // frame, no copy, and no fault when the engine first writes it.
    AcquireFrame(now_, b, events);
    rec.tier.store(Tier::kDevice, std::memory_order_relaxed);
    NoteArrival(rs, page);
    ++stats_.populated;
    return;
  }
  if (ps.op == Op::kSpill) {  // the data is still in host memory
    ps.op = Op::kNone;
    ++ps.stamp;
  }
  uint64_t avail = std::max(AcquireFrame(now_, b, events), ps.ready_ns);
  if (tier == Tier::kDisk) {
    avail = ReadFromDisk(avail, b);
    disk_used_ -= b;
  } else {
    host_used_ -= b;
  }
  const uint64_t end = Transfer(&h2d_free_, avail, b, costs_.h2d_bps, 0);
  ps.op = Op::kUp;
  ps.ready_ns = end;
  ++ps.stamp;
  up_.push_back({region.id, page, ps.stamp, end});
  SetInFlight(rec, true);
  stats_.h2d_prefetch_bytes += b;
}

Status ModelDevice::Spill(Region& region, uint32_t page) {
  MutexLock lock(&mu_);
  if (costs_.disk_bytes == 0) return Status::Error("model device: no disk tier (disk budget 0)");
  RegionState* rs = StateOf(region.id);
  if (!rs || page >= region.pages.size()) {
    return Status::Errorf("model device: spill of page %u of unknown region %u", page, region.id);
  }
  PageState& ps = rs->pages[page];
  PageRecord& rec = region.pages[page];
  if (rec.tier.load(std::memory_order_relaxed) != Tier::kHost || ps.op != Op::kNone) {
    return Status::Ok();
  }
  const uint64_t b = region.PageBytes(page);
  if (disk_used_ + b > costs_.disk_bytes) {
    return Status::Errorf("model device: disk tier full (%llu of %llu bytes)",
                          (unsigned long long)disk_used_, (unsigned long long)costs_.disk_bytes);
  }
  uint64_t end =
      Transfer(&ssd_free_, std::max(now_, ps.ready_ns), b, costs_.ssd_write_bps, SsdLatency(b));
  ps.op = Op::kSpill;
  ps.ready_ns = end;
  ++ps.stamp;
  spill_.push_back({region.id, page, ps.stamp, end});
  SetInFlight(rec, true);
  stats_.disk_write_bytes += b;
  return Status::Ok();
}

uint64_t ModelDevice::Touch(Region& region, const uint32_t* pages, size_t n) {
  std::vector<Event> events;
  uint64_t ready;
  {
    MutexLock lock(&mu_);
    RegionState* rs = StateOf(region.id);
    const uint64_t t0 = now_;
    ready = t0;
    if (!rs) return ready;
    // Pages the kernel has to wait for: the ones that fault.
    std::vector<uint32_t> faulting;
    for (size_t i = 0; i < n; ++i) {
      const uint32_t p = pages[i];
      if (p >= region.pages.size()) continue;
      const PageState& ps = rs->pages[p];
      if (ps.op == Op::kUp) {
        ready = std::max(ready, ps.ready_ns);
      } else if (ps.op == Op::kDown ||
                 region.pages[p].tier.load(std::memory_order_relaxed) != Tier::kDevice) {
        faulting.push_back(p);
      }
    }
    // A batch resolves the faulting pages of up to fault_batch_blocks VA
    // blocks (runs of pages in one block share its service latency).
    const uint32_t per_batch = std::max<uint32_t>(1, costs_.fault_batch_blocks);
    const uint64_t block_bytes = std::max<uint64_t>(costs_.fault_block_bytes, region.page_size);
    auto block_of = [&](uint32_t p) { return region.PageAddr(p) / block_bytes; };
    uint64_t batch_start = t0;
    for (size_t i = 0; i < faulting.size();) {
      size_t end_i = i;
      for (uint32_t blocks = 0; end_i < faulting.size(); ++end_i) {
        if (end_i == i || block_of(faulting[end_i]) != block_of(faulting[end_i - 1])) {
          if (blocks == per_batch) break;
          ++blocks;
        }
      }
      uint64_t t = batch_start + costs_.fault_batch_ns;
      uint64_t batch_end = t;
      for (size_t j = i; j < end_i; ++j) {
        const uint32_t p = faulting[j];
        PageState& ps = rs->pages[p];
        PageRecord& rec = region.pages[p];
        const uint64_t b = region.PageBytes(p);
        Tier from = rec.tier.load(std::memory_order_relaxed);
        uint64_t end;
        if (ps.op == Op::kDown) {
          // Touched while its demotion copies: the driver finishes the copy,
          // then migrates it back; its frame never became free.
          ps.op = Op::kNone;
          SetInFlight(rec, false);
          leaving_ -= b;
          ++stats_.aborted_demotions;
          from = Tier::kHost;
          end = Transfer(&h2d_free_, std::max(t, ps.ready_ns), b, costs_.fault_bps, 0);
          stats_.h2d_fault_bytes += b;
          ++stats_.faults;
        } else if (from == Tier::kUntouched) {
          end = AcquireFrame(t, b, &events);
          ++stats_.first_touches;
        } else {
          if (ps.op == Op::kSpill) {  // still in host memory: the spill is dropped
            ps.op = Op::kNone;
            SetInFlight(rec, false);
          }
          uint64_t avail = std::max(AcquireFrame(t, b, &events), ps.ready_ns);
          if (from == Tier::kDisk) {
            avail = ReadFromDisk(avail, b);
            disk_used_ -= b;
          } else {
            host_used_ -= b;
          }
          end = Transfer(&h2d_free_, avail, b, costs_.fault_bps, 0);
          stats_.h2d_fault_bytes += b;
          ++stats_.faults;
        }
        rec.tier.store(Tier::kDevice, std::memory_order_relaxed);
        ps.ready_ns = end;
        NoteArrival(*rs, p);
        stats_.fault_wait_ns += end - t0;
        events.push_back({false, &region, p, from, end - t0});
        batch_end = std::max(batch_end, end);
      }
      ++stats_.fault_batches;
      batch_start = batch_end;
      i = end_i;
    }
    ready = std::max(ready, batch_start);
  }
  Notify(events);
  return ready;
}

void ModelDevice::Notify(const std::vector<Event>& events) {
  if (!events_) return;
  for (const Event& e : events) {
    if (e.eviction) {
      events_->OnDriverEviction(*e.region, e.page);
    } else {
      events_->OnFault(*e.region, e.page, e.from, e.wait_ns);
    }
  }
}

uint64_t ModelDevice::resident_bytes() const {
  MutexLock lock(&mu_);
  return occupied_ - leaving_;
}

uint64_t ModelDevice::now_ns() const {
  MutexLock lock(&mu_);
  return now_;
}

uint64_t ModelDevice::busy_until_ns() const {
  MutexLock lock(&mu_);
  return std::max({h2d_free_, d2h_free_, ssd_free_});
}

bool ModelDevice::transfers_pending() const {
  MutexLock lock(&mu_);
  return !up_.empty() || !down_.empty() || !spill_.empty();
}

uint64_t ModelDevice::host_used_bytes() const {
  MutexLock lock(&mu_);
  return host_used_;
}

uint64_t ModelDevice::disk_used_bytes() const {
  MutexLock lock(&mu_);
  return disk_used_;
}

uint64_t ModelDevice::residency_epoch() const {
  MutexLock lock(&mu_);
  return epoch_;
}

ModelDeviceStats ModelDevice::stats() const {
  MutexLock lock(&mu_);
  return stats_;
}

}  // namespace kvtier
