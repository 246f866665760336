// The CUDA backend's disk tier in `kvtier-bench spill` (see spill_bench.h):
// a managed region of --size bytes spilled through UvmDevice::SpillPages as
// the policy tick does (written from managed memory, then discarded), and
// brought back by kvtier_wait (UvmDevice::Restore) and by the submission
// gate (a launch after an idle seal), with single-page waits timed beside a
// raw read. On a machine without a GPU the driver is a host-memory stand-in
// (cuda::fake::HostApi: managed memory is anonymous memory; a discard frees
// it, as the driver frees a discarded range; prefetches do nothing), so the
// figures are kvtier's own path and the SSD, without the PCIe copies a GPU
// adds. Thread-safety: single-threaded phase.
#include <string.h>

#include <algorithm>
#include <vector>

#include "runtime/mover.h"  // kSpillGroupPages
#include "runtime/storage/spill_store.h"
#include "tools/bench/spill_bench.h"
#ifdef KVTIER_HAVE_CUDA
#include "runtime/device/cuda/uvm_device.h"
#include "tests/testing/fake_cuda_driver.h"
#endif

namespace kvtier::bench::spill {

#ifndef KVTIER_HAVE_CUDA

Result<CudaResult> RunCudaPhase(const Args&, const uint8_t*, Target*) {
  return Status::Error("this build has no CUDA backend (KVTIER_WITH_CUDA=OFF)");
}

#else

namespace {

// The real driver on GPU 0, its primary context retained (the device
// releases it), or why not.
Result<cuda::UvmDeviceConfig> GpuDriver() {
  Result<cuda::DriverApi> api = cuda::DriverApi::Load();
  if (!api.ok()) return api.status();
  cuda::UvmDeviceConfig config;
  config.api = api.value();
  int count = 0, managed = 0;
  CUresult r = config.api.cuInit(0);
  if (r == CUDA_SUCCESS) r = config.api.cuDeviceGetCount(&count);
  if (r != CUDA_SUCCESS || count == 0) return Status::Error("no GPU answers");
  config.api.cuDeviceGetAttribute(&managed, CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, 0);
  if (!managed) return Status::Error("GPU 0 has no concurrent managed memory access");
  if ((r = config.api.cuDevicePrimaryCtxRetain(&config.context, 0)) != CUDA_SUCCESS) {
    return Status::Errorf("no context on GPU 0 (%s)", config.api.ErrorName(r));
  }
  return config;
}

// The stand-in's share of a restore, on one core: a page's bytes at a time
// written into managed memory that a discard of each page freed, as a
// restore writes them (each 4 KiB faulted in and zeroed by the kernel on its
// first write), up to 256 MiB of src. Timed on the second discard: the
// first meets memory as new (this virtual machine fills memory it must ask
// the host for again many times slower), a restore meets what spills gave
// back just before. GB/s, or 0 where the stand-in fails.
double RefillOneCoreGbs(const Args& a, const uint8_t* src) {
  const size_t bytes = std::min<size_t>(a.size, size_t{256} << 20) / a.page * a.page;
  const cuda::DriverApi api = cuda::fake::HostApi();
  CUdeviceptr base = 0;
  if (bytes == 0 || api.cuMemAllocManaged(&base, bytes, CU_MEM_ATTACH_GLOBAL) != CUDA_SUCCESS) {
    return 0;
  }
  auto* dst = reinterpret_cast<uint8_t*>(base);
  memcpy(dst, src, bytes);
  std::vector<CUdeviceptr> ptrs;
  std::vector<size_t> sizes;
  for (size_t off = 0; off < bytes; off += a.page) {
    ptrs.push_back(base + off);
    sizes.push_back(a.page);
  }
  double gbs = 0;
  for (int pass = 0; pass < 2; ++pass) {
    if (api.cuMemDiscardBatchAsync(ptrs.data(), sizes.data(), ptrs.size(), 0, nullptr) !=
        CUDA_SUCCESS) {
      gbs = 0;
      break;
    }
    const double t0 = Now();
    for (size_t off = 0; off < bytes; off += a.page) memcpy(dst + off, src + off, a.page);
    gbs = static_cast<double>(bytes) / (Now() - t0) / kGB;
  }
  api.cuMemFree(base);
  return gbs;
}

// ---- The phase ----

struct Rig {
  Counters counters;
  std::unique_ptr<SpillStore> store;
  std::unique_ptr<cuda::UvmDevice> device;
  RegionPtr region;
  size_t pages = 0;

  Status Open(const Args& a, cuda::UvmDeviceConfig config) {
    SpillStoreConfig cfg;
    cfg.dir = a.dir;
    cfg.budget_bytes = a.size;
    cfg.page_size = a.page;
    cfg.queue_depth = a.qd;
    cfg.cipher = StoreCipher(a);
    Result<std::unique_ptr<SpillStore> > s = SpillStore::Create(cfg, Env::Default(), &counters);
    if (!s.ok()) return s.status();
    store = std::move(s).value();
    config.budget.all = 16 * a.page;  // a few pages of GPU memory: the region lives on the host
    config.page_size = a.page;
    config.counters = &counters;
    config.use_cupti = false;
    config.maintenance_ms = 100000;  // the phase seals by hand
    config.store = store.get();
    config.idle_ns = 1;
    config.watch = cuda::UvmDeviceConfig::Watch::kCaller;  // the phase plays the engine's launches
    Result<std::unique_ptr<cuda::UvmDevice> > d = cuda::UvmDevice::Create(std::move(config));
    if (!d.ok()) return d.status();
    device = std::move(d).value();
    pages = a.size / a.page;
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

  // Spills every page in groups, as the policy tick does; seconds.
  Result<double> SpillAll() {
    const double t0 = Now();
    if (Status s = SpillInGroups(*device, *region, pages, kSpillGroupPages); !s.ok()) return s;
    for (size_t p = 0; p < pages; ++p) {
      if (region->pages[p].tier.load() != Tier::kDisk) {
        return Status::Errorf("page %zu did not reach the disk tier", p);
      }
    }
    return Now() - t0;
  }
  Status Dormant(bool on) {
    return device->SetDormant(*region, 0, static_cast<uint32_t>(pages), on);
  }
};

}  // namespace

Result<CudaResult> RunCudaPhase(const Args& a, const uint8_t* src, Target* raw) {
  CudaResult out;
  cuda::UvmDeviceConfig config;
  config.api = cuda::fake::HostApi();
  out.driver = "a host-memory stand-in (--cuda host)";
  bool stand_in = true;
  if (a.cuda != "host") {
    Result<cuda::UvmDeviceConfig> gpu = GpuDriver();
    if (gpu.ok()) {
      config = std::move(gpu).value();
      out.driver = "the CUDA driver on GPU 0";
      stand_in = false;
    } else if (a.cuda == "gpu") {
      return gpu.status().Annotate("--cuda gpu");
    } else {
      out.driver = "a host-memory stand-in (" + gpu.status().message() + ")";
    }
  }
  Rig rig;
  if (Status s = rig.Open(a, std::move(config)); !s.ok()) return s.Annotate("CUDA phase");
  // The engine's bytes, written from the CPU; the pages start on the host.
  for (size_t p = 0; p < rig.pages; ++p) {
    memcpy(rig.Page(p), src + p * a.page, a.page);
    if (Status s = rig.device->Promote(*rig.region, static_cast<uint32_t>(p)); !s.ok()) return s;
    if (Status s = rig.device->Demote(*rig.region, static_cast<uint32_t>(p)); !s.ok()) return s;
  }
  const double gb = static_cast<double>(rig.pages * a.page) / kGB;
  uint64_t pick = a.seed * 0x9E3779B97F4A7C15ull + 11;
  for (int round = 0; round < a.rounds; ++round) {
    // Dormant: spilled without a seal, back on kvtier_wait.
    if (Status s = rig.Dormant(true); !s.ok()) return s;
    Result<double> t = rig.SpillAll();
    if (!t.ok()) return t.status().Annotate("CUDA phase");
    out.spill_gbs.push_back(gb / t.value());
    RawBeside wait_raw(raw, rig.pages * a.page);
    if (Status s = wait_raw.Read(); !s.ok()) return s.Annotate("CUDA phase");
    double t0 = Now();
    const double cpu0 = CpuSeconds();
    if (Status s = rig.device->Restore(*rig.region, 0, static_cast<uint32_t>(rig.pages)); !s.ok()) {
      return s;
    }
    out.wait_gbs.push_back(gb / (Now() - t0));
    out.wait_cpu_s_per_gb.push_back((CpuSeconds() - cpu0) / gb);
    if (Status s = wait_raw.Read(); !s.ok()) return s.Annotate("CUDA phase");
    out.wait_raw_gbs.push_back(wait_raw.gbs());
    // Sealed: spilled while idle, back before the next launch runs.
    rig.device->CheckIdle();
    if (!rig.device->sealed()) return Status::Error("CUDA phase: the idle process did not seal");
    t = rig.SpillAll();
    if (!t.ok()) return t.status().Annotate("CUDA phase");
    RawBeside gate_raw(raw, rig.pages * a.page);
    if (Status s = gate_raw.Read(); !s.ok()) return s.Annotate("CUDA phase");
    t0 = Now();
    rig.device->OnSubmitEnter();
    rig.device->OnSubmitExit();
    out.gate_gbs.push_back(gb / (Now() - t0));
    if (Status s = gate_raw.Read(); !s.ok()) return s.Annotate("CUDA phase");
    out.gate_raw_gbs.push_back(gate_raw.gbs());
    // Single pages: kvtier_wait of one spilled page, beside a raw read.
    if (Status s = rig.Dormant(true); !s.ok()) return s;
    t = rig.SpillAll();
    if (!t.ok()) return t.status().Annotate("CUDA phase");
    for (int s = 0; s < a.samples; ++s) {
      const uint32_t p = static_cast<uint32_t>(NextRandom(&pick) % rig.pages);
      if (rig.region->pages[p].tier.load() != Tier::kDisk) continue;
      t0 = Now();
      if (Status st = rig.device->Restore(*rig.region, p, 1); !st.ok()) return st;
      out.wait_ms.push_back((Now() - t0) * 1e3);
      Result<double> r = raw->ReadOne(NextRandom(&pick) % rig.pages);
      if (!r.ok()) return r.status().Annotate("raw read beside the CUDA phase");
      out.raw_ms.push_back(r.value() * 1e3);
    }
    if (Status s = rig.device->Restore(*rig.region, 0, static_cast<uint32_t>(rig.pages)); !s.ok()) {
      return s;
    }
  }
  for (size_t p = 0; p < rig.pages; ++p) {
    out.wrong_pages += memcmp(rig.Page(p), src + p * a.page, a.page) != 0;
  }
  out.pages = rig.pages;
  out.io_mode = rig.store->io_mode();
  out.restored = Counters::Get(rig.counters.restored_pages);
  out.stalls = Counters::Get(rig.counters.gate_stalls);
  out.stand_in = stand_in;
  if (stand_in) out.refill_gbs = RefillOneCoreGbs(a, src);
  return out;
}

#endif  // KVTIER_HAVE_CUDA

}  // namespace kvtier::bench::spill
