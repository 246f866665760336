// The simulated-GPU phases of `kvtier-bench spill` (see spill_bench.h):
// pages of a data-backed sim region spilled through Device::SpillPages as the
// policy tick does (copied from the alias mapping, punched out of the memfd) and brought back by an
// engine thread's touch (a MISSING fault: read + tag check into a private
// buffer, UFFDIO_COPY), timed from the toucher's side; and the same path
// over FaultEnv. Thread-safety: the phases start their own engine threads
// and join them before returning.
#include <fcntl.h>
#include <stdio.h>
#include <string.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/device/memfd/memfd_device.h"
#include "runtime/mover.h"
#include "runtime/storage/fault_env.h"
#include "runtime/storage/spill_store.h"
#include "tools/bench/spill_bench.h"

namespace kvtier::bench::spill {
namespace {

constexpr uint32_t kDevicePages = 16;  // the sim GPU's capacity, in pages

// A store and a sim device over it, with one region of every page in src.
struct Rig {
  Counters counters;
  std::unique_ptr<SpillStore> store;
  std::unique_ptr<MemfdDevice> device;
  RegionPtr region;
  size_t pages = 0;

  Status Open(const Args& a, Env* env, int fault_threads, uint64_t budget,
              size_t device_pages = kDevicePages) {
    SpillStoreConfig cfg;
    cfg.dir = a.dir;
    cfg.budget_bytes = budget;
    cfg.page_size = a.page;
    cfg.queue_depth = a.qd;
    cfg.cipher = StoreCipher(a);
    cfg.backoff_min_ns = 1'000'000;  // short waits keep the fault phase quick
    cfg.backoff_max_ns = 16'000'000;
    Result<std::unique_ptr<SpillStore>> s = SpillStore::Create(cfg, env, &counters);
    if (!s.ok()) return s.status();
    store = std::move(s).value();
    MemfdDeviceConfig dc;
    dc.capacity_bytes = device_pages * a.page;
    dc.fault_threads = std::clamp(fault_threads, 1, 16);
    dc.counters = &counters;
    dc.store = store.get();
    Result<std::unique_ptr<MemfdDevice>> d = MemfdDevice::Create(dc);
    if (!d.ok()) return d.status();
    device = std::move(d).value();
    pages = budget / a.page;
    Result<RegionPtr> r = device->CreateRegion(1, pages * a.page, a.page, "kvtier-bench spill");
    if (!r.ok()) return r.status();
    region = r.value();
    return Status::Ok();
  }
  ~Rig() {
    if (region) device->DestroyRegion(*region);
    device.reset();  // before the store
  }
  uint8_t* Page(size_t p) const { return reinterpret_cast<uint8_t*>(region->PageAddr(p)); }

  // Demotes what is resident and spills every page from one thread in
  // groups of `group` pages through Device::SpillPages, as the policy tick
  // does. Returns the seconds the spills took, or the first error.
  Result<double> SpillAll(size_t group) {
    for (size_t p = 0; p < pages; ++p) {
      if (Status s = device->Demote(*region, p); !s.ok()) return s;
    }
    double t0 = Now();
    if (Status s = SpillInGroups(*device, *region, pages, group); !s.ok()) return s;
    return Now() - t0;
  }

  // Touches one word of every page from `threads` engine threads, each
  // touch a fault that restores the page. Returns the seconds it took.
  double TouchAll(unsigned threads) {
    std::atomic<size_t> next{0};
    double t0 = Now();
    std::vector<std::thread> engines;
    for (unsigned t = 0; t < threads; ++t) {
      engines.emplace_back([&] {
        for (size_t p; (p = next.fetch_add(1)) < pages;) {
          (void)*reinterpret_cast<volatile uint64_t*>(Page(p));
        }
      });
    }
    for (auto& e : engines) e.join();
    return Now() - t0;
  }

  // Pages whose bytes differ from src (read through the engine view).
  size_t Differing(const uint8_t* src) const {
    size_t bad = 0;
    for (size_t p = 0; p < pages; ++p)
      bad += memcmp(Page(p), src + p * region->page_size, region->page_size) != 0;
    return bad;
  }
};

}  // namespace

Status SpillInGroups(Device& device, Region& region, size_t pages, size_t group) {
  std::vector<PageRef> refs;
  std::vector<Status> results;
  for (size_t first = 0; first < pages; first += group) {
    refs.clear();
    for (size_t p = first; p < std::min(pages, first + group); ++p) {
      refs.push_back({&region, static_cast<uint32_t>(p)});
    }
    results.assign(refs.size(), Status::Ok());
    device.SpillPages(refs, results);
    for (const Status& s : results) {
      if (!s.ok()) return s;
    }
  }
  return Status::Ok();
}

double InstallOneCoreGbs(const Args& a, const uint8_t* src) {
  const size_t bytes = std::min<size_t>(a.size, size_t{256} << 20) / a.page * a.page;
  Result<UserFaultFd> uffd = UserFaultFd::Open();
  if (!uffd.ok() || bytes == 0) return 0;
  // A new memfd has no bytes, as a spill leaves the pages it punched out.
  Result<ShmViews> made = ShmViews::Create(bytes, a.page, "kvtier-bench install");
  if (!made.ok()) return 0;
  ShmViews views = made.value();
  const auto engine = reinterpret_cast<uintptr_t>(views.engine);
  // The memory a restore installs into is what spills gave back just before
  // (this virtual machine gives the host memory that stays free a while,
  // and takes many times longer to fill memory it must ask for again):
  // bytes written through the alias, then punched out, as a spill does.
  memcpy(views.alias, src, bytes);
  const bool punched = fallocate(views.memfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
                                 static_cast<off_t>(bytes)) == 0;
  bool zeropage = false, protectable = false;
  double gbs = 0;
  if (punched && uffd.value().Register(engine, bytes, &zeropage, &protectable).ok()) {
    const double t0 = Now();
    size_t off = 0;
    while (off < bytes && uffd.value().Copy(engine + off, a.page, src + off).ok()) off += a.page;
    if (off == bytes) gbs = static_cast<double>(bytes) / (Now() - t0) / kGB;
    (void)uffd.value().Unregister(engine, bytes);
  }
  views.Release();
  return gbs;
}

Result<DeviceResult> RunDevicePhase(const Args& a, const uint8_t* src, Target* raw) {
  DeviceResult out;
  Rig rig;
  if (Status s = rig.Open(a, Env::Default(), static_cast<int>(DeviceThreads(a)), a.size); !s.ok()) {
    return s.Annotate("simulated GPU phase");
  }
  out.fault_threads = static_cast<int>(DeviceThreads(a));
  // Fill through the engine view, as the engine would.
  for (size_t p = 0; p < rig.pages; ++p) memcpy(rig.Page(p), src + p * a.page, a.page);
  uint64_t pick = a.seed * 0x9E3779B97F4A7C15ull + 5;
  const double gb = static_cast<double>(rig.pages * a.page) / kGB;
  for (int round = 0; round < a.rounds; ++round) {
    Result<double> t = rig.SpillAll(kSpillGroupPages);
    if (!t.ok()) return t.status().Annotate("simulated GPU phase");
    out.spill_gbs.push_back(gb / t.value());
    RawBeside beside(raw, rig.pages * a.page);
    if (Status s = beside.Read(); !s.ok()) return s.Annotate("simulated GPU phase");
    out.restore_gbs.push_back(gb / rig.TouchAll(DeviceThreads(a)));
    if (Status s = beside.Read(); !s.ok()) return s.Annotate("simulated GPU phase");
    out.restore_raw_gbs.push_back(beside.gbs());
    t = rig.SpillAll(kSpillGroupPages);
    if (!t.ok()) return t.status().Annotate("simulated GPU phase");
    // One engine thread touches distinct spilled pages in a random order,
    // timing each touch: nothing else runs, as in the raw single-page reads.
    std::vector<size_t> order(rig.pages);
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[NextRandom(&pick) % i]);
    order.resize(std::min<size_t>(order.size(), static_cast<size_t>(a.samples)));
    for (size_t p : order) {
      double t0 = Now();
      (void)*reinterpret_cast<volatile uint64_t*>(rig.Page(p));
      out.fault_ms.push_back((Now() - t0) * 1e3);
      Result<double> r = raw->ReadOne(NextRandom(&pick) % rig.pages);
      if (!r.ok()) return r.status().Annotate("raw read beside the simulated GPU phase");
      out.raw_ms.push_back(r.value() * 1e3);
    }
    rig.TouchAll(1);  // the rest, so the next round spills every page again
  }
  out.wrong_pages = rig.Differing(src);
  out.io_mode = rig.store->io_mode();
  out.pages = rig.pages;
  out.device_pages = kDevicePages;
  out.restored = Counters::Get(rig.counters.restored_pages);
  out.faults = Counters::Get(rig.counters.faults);
  out.checksum_mismatches = Counters::Get(rig.counters.checksum_mismatches);
  return out;
}

Status RunReturnPhase(const Args& a, const uint8_t* src, Target* raw, DeviceResult* out) {
  // A device that holds the whole region, as it holds a returning session:
  // the restore evicts nothing, so it measures the way back alone.
  Rig rig;
  const size_t pages = a.size / a.page;
  if (Status s = rig.Open(a, Env::Default(), static_cast<int>(DeviceThreads(a)), a.size, pages);
      !s.ok()) {
    return s.Annotate("simulated GPU phase (a device that holds the region)");
  }
  for (size_t p = 0; p < rig.pages; ++p) memcpy(rig.Page(p), src + p * a.page, a.page);
  const double gb = static_cast<double>(rig.pages * a.page) / kGB;
  uint64_t faults = 0, ahead = 0;
  for (int round = 0; round < a.rounds; ++round) {
    Result<double> t = rig.SpillAll(kSpillGroupPages);
    if (!t.ok()) return t.status().Annotate("simulated GPU phase (a device that holds the region)");
    RawBeside beside(raw, rig.pages * a.page);
    if (Status s = beside.Read(); !s.ok()) return s.Annotate("simulated GPU phase");
    const uint64_t faults0 = Counters::Get(rig.counters.faults);
    const uint64_t ahead0 = Counters::Get(rig.counters.restored_ahead_pages);
    const double cpu0 = CpuSeconds();
    out->return_gbs.push_back(gb / rig.TouchAll(DeviceThreads(a)));
    out->return_cpu_s_per_gb.push_back((CpuSeconds() - cpu0) / gb);
    if (Status s = beside.Read(); !s.ok()) return s.Annotate("simulated GPU phase");
    out->return_raw_gbs.push_back(beside.gbs());
    faults += Counters::Get(rig.counters.faults) - faults0;
    ahead += Counters::Get(rig.counters.restored_ahead_pages) - ahead0;
  }
  out->return_faults = faults;
  out->return_ahead = ahead;
  out->install_gbs = InstallOneCoreGbs(a, src);
  out->wrong_pages += rig.Differing(src);
  return Status::Ok();
}

bool RunDeviceFaultPhase(const Args& a, const uint8_t* src) {
  const uint64_t size = std::min<uint64_t>(a.size, uint64_t{256} << 20);
  FaultEnv env(Env::Default(), a.seed);
  Rig rig;
  if (Status s = rig.Open(a, &env, 1, size); !s.ok()) {
    printf("simulated GPU faults: %s\n", s.message().c_str());
    return false;
  }
  for (size_t p = 0; p < rig.pages; ++p) memcpy(rig.Page(p), src + p * a.page, a.page);
  // Write faults at random (each leaves its page on the host, and the
  // next pass retries it); read faults armed one at a time below, since a
  // restore whose read and retry both fail stops the process by design.
  for (Fault f : {Fault::kWriteNoSpace, Fault::kWriteIoError, Fault::kShortWrite}) {
    env.SetRate(f, 0.02);
  }
  env.SetRate(Fault::kSlow, 0.05);
  env.SetSlowDelay(2'000'000);
  size_t passes = 0, on_disk = 0;
  for (; passes < 1000 && on_disk < rig.pages; ++passes) {
    while (!rig.store->writable()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    on_disk = 0;
    for (size_t p = 0; p < rig.pages; ++p) {
      (void)rig.device->Demote(*rig.region, p);
      (void)rig.device->Spill(*rig.region, p);  // a failure leaves the page on the host
      on_disk += rig.region->pages[p].tier.load() == Tier::kDisk;
    }
  }
  env.SetRate(Fault::kSlow, 0);
  // One engine thread touches the pages in order: each armed read fault
  // hits exactly one read, whose retry then succeeds.
  for (size_t p = 0; p < rig.pages; ++p) {
    if (p % 8 == 1) env.Arm(p % 16 == 1 ? Fault::kReadIoError : Fault::kReadBitFlip, 1);
    (void)*reinterpret_cast<volatile uint64_t*>(rig.Page(p));
  }
  const size_t wrong = rig.Differing(src);
  const Counters& c = rig.counters;
  const uint64_t write_faults = env.injected(Fault::kWriteNoSpace) +
                                env.injected(Fault::kWriteIoError) +
                                env.injected(Fault::kShortWrite);
  const uint64_t read_faults =
      env.injected(Fault::kReadIoError) + env.injected(Fault::kReadBitFlip);
  printf(
      "\nsimulated GPU through faults (FaultEnv seed %llu, %zu pages): %zu on disk after %zu "
      "passes; injected write faults %llu (spill_errors %llu), read faults %llu (restore_errors "
      "%llu + checksum_mismatches %llu), slow %llu; restored %llu, %zu pages wrong\n",
      static_cast<unsigned long long>(a.seed), rig.pages, on_disk, passes,
      static_cast<unsigned long long>(write_faults),
      static_cast<unsigned long long>(Counters::Get(c.spill_errors)),
      static_cast<unsigned long long>(read_faults),
      static_cast<unsigned long long>(Counters::Get(c.restore_errors)),
      static_cast<unsigned long long>(Counters::Get(c.checksum_mismatches)),
      static_cast<unsigned long long>(env.injected(Fault::kSlow)),
      static_cast<unsigned long long>(Counters::Get(c.restored_pages)), wrong);
  const bool ok =
      on_disk == rig.pages && wrong == 0 && Counters::Get(c.spill_errors) == write_faults &&
      Counters::Get(c.restore_errors) + Counters::Get(c.checksum_mismatches) == read_faults &&
      Counters::Get(c.restored_pages) == rig.pages;
  printf("  %s: every page came back exactly; every injected error shows in the stats\n",
         ok ? "PASS" : "FAIL");
  return ok;
}

}  // namespace kvtier::bench::spill
