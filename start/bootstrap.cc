// The composition root: the process's options, the backend choice, the
// parts each backend's runtime is made of (bootstrap.h), the one instance
// and what fork and exit do to it (process.h). Everything else about a
// runtime is in runtime/runtime.cc.
#include "start/bootstrap.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <new>

#include "policies/registry.h"
#include "runtime/allocation_matcher.h"
#include "runtime/device/memfd/memfd_device.h"
#include "runtime/log.h"
#include "runtime/memory_wall.h"
#include "runtime/mutex.h"
#include "runtime/options.h"
#include "runtime/runtime.h"
#include "runtime/storage/env.h"
#include "runtime/storage/fault_env.h"
#include "runtime/units.h"
#include "runtime/va_range.h"
#include "start/process.h"
#ifdef KVTIER_HAVE_CUDA
#include "runtime/device/cuda/cuda_device.h"
#endif

namespace kvtier {
namespace {

// The parts every backend's runtime starts from: the policies of the
// registry. Start-up is where the runtime and policies/ meet; the runtime
// itself knows only the Policy interface.
Runtime::Parts ProcessParts() {
  Runtime::Parts parts;
  parts.policy = [](std::string_view name, const PolicySettings& settings) {
    return MakePolicy(name, settings);
  };
  return parts;
}

// Process-wide instance. Not destroyed at exit: engine threads and static
// destructors may still touch tiered memory, so the fault handlers must live
// until the process is gone. A fork child starts without one.
Mutex g_init_mu;
std::atomic<Runtime*> g_runtime{nullptr};
std::atomic<bool> g_init_done{false};

void ShutdownAtExit() {
  if (Runtime* rt = g_runtime.load(std::memory_order_acquire)) rt->Shutdown();
}

// Runs after ShutdownAtExit (registered before it): the key goes last.
void WipeSpillKeyAtExit(int status, void*) {
  if (Runtime* rt = g_runtime.load(std::memory_order_acquire)) rt->WipeKeyAtExit(status);
}

// The backend's fork steps around the child's reset (Device::BeforeFork).
void PrepareFork() {
  if (Runtime* rt = g_runtime.load(std::memory_order_acquire)) rt->device().BeforeFork();
}

void AfterForkInParent() {
  if (Runtime* rt = g_runtime.load(std::memory_order_acquire)) rt->device().AfterForkInParent();
}

void ResetInChild() {
  // The parent's threads do not exist here and its userfaultfd registrations
  // were dropped by fork; the child builds its own runtime if it uses CUDA.
  // The parent's instance is leaked: a parent thread may have held one of its
  // locks at fork time.
  if (Runtime* parent = g_runtime.load(std::memory_order_relaxed))
    parent->device().AfterForkInChild();
  g_runtime.store(nullptr, std::memory_order_relaxed);
  g_init_done.store(false, std::memory_order_relaxed);
  new (&g_init_mu) Mutex();
}

// KVTIER_HOST_BUDGET against the memory wall (runtime/memory_wall.h):
// unset, the runtime follows the wall; fixed above the wall itself, capped
// to the room it leaves, said in one line.
void HoldToWall(const Options& options, Runtime::Parts* parts, Options* effective) {
  Env& env = parts->wall_env ? *parts->wall_env : *Env::Default();
  if (options.host_budget == 0) {
    parts->follow_wall = true;
    return;
  }
  std::string said;
  effective->host_budget =
      CapFixedBudget(options.host_budget, env, parts->wall_root, WallFloor(options.page_size),
                     options.disk_budget ? kDiskBufferReserve : 0, &said);
  if (!said.empty()) Log(0, "%s", said.c_str());
}

// The runtime of KVTIER_BACKEND=sim: the data-backed simulated GPU, sized by
// KVTIER_DEVICE_BUDGET or nine tenths of the simulated device's memory.
Runtime* StartSim(const Options& options) {
  Options effective = options;
  if (effective.device_budget.For(0) == 0) {
    effective.device_budget = DeviceSizes{effective.sim_device_memory / 10 * 9, {}};
  }
  Runtime::Parts parts = SimParts();
  HoldToWall(options, &parts, &effective);
  auto created = Runtime::Create(effective, parts);
  if (created.ok()) return created.value().release();
  Log(0, "cannot start the simulated GPU: %s; running without kvtier",
      created.status().message().c_str());
  return nullptr;
}

// The runtime of KVTIER_BACKEND=host (HostBackendParts), its views in the
// process's VaRange, which the free() hook tests.
Runtime* StartHost(const Options& options) {
  Options effective;
  Runtime::Parts parts = ProcessParts();
  if (Status s = HostBackendParts(options, &VaRange::Process(), &effective, &parts); !s.ok()) {
    Log(0, "KVTIER_BACKEND=host: %s; running without kvtier", s.message().c_str());
    return nullptr;
  }
  if (options.disk_budget == 0) {
    Log(0,
        "KVTIER_BACKEND=host with KVTIER_DISK_BUDGET=0: there is no disk tier, so tiered "
        "blocks stay in memory (set KVTIER_DISK_BUDGET to spill them to SSD)");
  }
  // Room for every block kvtier can back, twice over (alignment, reuse); an
  // automatic budget may grow up to the machine's memory.
  const uint64_t memory = effective.device_budget.all + effective.host_budget;
  const uint64_t backed =
      (parts.follow_wall ? std::max(memory, PhysicalMemory()) : memory) + options.disk_budget;
  const uint64_t reserve = std::min<uint64_t>(2 * backed + (1ull << 30), 1ull << 46);
  if (Status s = VaRange::Process().Reserve(reserve); !s.ok()) {
    Log(0, "cannot start the host backend: %s; running without kvtier", s.message().c_str());
    return nullptr;
  }
  auto created = Runtime::Create(effective, parts);
  if (created.ok()) return created.value().release();
  Log(0, "cannot start the host backend: %s; running without kvtier",
      created.status().message().c_str());
  return nullptr;
}

// The runtime of KVTIER_BACKEND=auto|cuda: the CUDA backend, or none (every
// call passes through) when no GPU answers.
Runtime* StartCuda(const Options& options) {
#ifdef KVTIER_HAVE_CUDA
  Runtime::Parts parts = ProcessParts();
  parts.device = [](const Runtime::DeviceContext& ctx) {
    return MakeCudaDevice(ctx.options, ctx.events, ctx.counters, ctx.open_store);
  };
  Options effective = options;
  HoldToWall(options, &parts, &effective);
  auto created = Runtime::Create(effective, parts);
  if (!created.ok()) {
    // No usable GPU: every call passes through, and the program sees the
    // CUDA runtime's own error codes.
    Log(1, "KVTIER_BACKEND=%s: %s; passing every call through", BackendName(options.backend),
        created.status().message().c_str());
    return nullptr;
  }
  return created.value().release();
#else
  Log(1, "KVTIER_BACKEND=%s: this build has no CUDA backend; passing every call through",
      BackendName(options.backend));
  return nullptr;
#endif
}

}  // namespace

HostShares SplitHostBudget(uint64_t budget, uint64_t page) {
  // An eighth stages pages on their way to SSD: room for the spill batches
  // the policy writes while faults keep coming.
  HostShares shares;
  shares.host = std::max<uint64_t>(budget / 8 / page, 1) * page;
  shares.device = budget > shares.host ? budget - shares.host : 0;
  return shares;
}

Runtime::DeviceFactory DataDeviceFactory(DataDeviceShape shape) {
  return [shape](const Runtime::DeviceContext& ctx) -> Result<std::unique_ptr<Device>> {
    MemfdDeviceConfig config;
    config.store = ctx.open_store();
    config.capacity_bytes = ctx.options.device_budget.For(0);
    config.fault_threads = static_cast<int>(ctx.options.sim_fault_threads);
    config.events = ctx.events;
    config.counters = ctx.counters;
    config.check_step = ctx.check_step;
    config.backend = shape.backend;
    config.range = shape.range;
    config.host_limit_bytes = shape.host_limit;
    config.fill_ahead_pages = shape.fill_ahead;
    config.copy_ahead = true;
    Result<std::unique_ptr<MemfdDevice>> made = MemfdDevice::Create(config);
    if (!made.ok()) return made.status();
    return std::unique_ptr<Device>(std::move(made).value());
  };
}

Runtime::Parts SimParts() {
  Runtime::Parts parts = ProcessParts();
  parts.device = DataDeviceFactory({});
  return parts;
}

Status HostBackendParts(const Options& options, VaRange* range, Options* effective,
                        Runtime::Parts* parts) {
  // The data-backed device tiers heap blocks of a CPU engine. Its "device"
  // is the blocks' resident memory and its "host" tier the pages unmapped on
  // their way to SSD, so together they stay within KVTIER_HOST_BUDGET, or
  // within the automatic budget that follows the memory wall.
  const uint64_t page = options.page_size;
  *effective = options;
  HoldToWall(options, parts, effective);
  uint64_t budget = effective->host_budget;
  if (parts->follow_wall) {
    WallReading wall;
    budget = StartBudget(parts->wall_env ? *parts->wall_env : *Env::Default(), parts->wall_root,
                         WallFloor(page), options.disk_budget ? kDiskBufferReserve : 0, &wall);
  }
  if (options.disk_budget == 0) {
    // No disk tier: a budget could not be met by moving pages out, so the
    // start's look fixes it (and blocks past it stay plain heap).
    parts->follow_wall = false;
  }
  const HostShares shares = SplitHostBudget(budget, page);
  if (budget < shares.host + 2 * page) {
    return Status::Errorf(
        "KVTIER_HOST_BUDGET=%s is too small for pages of %s (it needs at least %s)",
        FormatBytes(budget).c_str(), FormatBytes(page).c_str(),
        FormatBytes(shares.host + 2 * page).c_str());
  }
  effective->device_budget = DeviceSizes{shares.device, {}};
  effective->host_budget = shares.host;
  parts->split_host_budget = [page](uint64_t b) { return SplitHostBudget(b, page); };
  DataDeviceShape shape;
  shape.backend = Backend::kHost;
  shape.range = range;
  // predictive's groups are slots across per-layer tensors; llama.cpp keeps
  // every layer in one block, where they come out as scattered fragments
  // that churn (measured: commit 3463d6a). lru goes by the access
  // evidence the device reports, faults and pages that arrive ahead.
  parts->auto_policy = "lru";
  if (options.disk_budget > 0) shape.host_limit = shares.host;
  // A CPU engine clears its KV buffer and writes new KV in order: a first
  // touch populates the rest of 1 MiB with it, so the next ones spare a
  // fault each.
  shape.fill_ahead = static_cast<uint32_t>(std::max<uint64_t>((1u << 20) / page, 1) - 1);
  parts->device = DataDeviceFactory(shape);
  return Status::Ok();
}

const Options& ProcessOptions() {
  static const Options options = [] {
    Result<Options> parsed = ParseOptions(ProcessEnv());
    Status status = parsed.status();
    if (status.ok()) {
      Result<AllocationMatcher> match = AllocationMatcher::Parse(parsed.value().match);
      if (!match.ok()) {
        status = Status::Error("KVTIER_MATCH=" + EchoValue(parsed.value().match) + ": " +
                               match.status().message());
      }
    }
    if (status.ok()) status = ParseFaultSpec(parsed.value().disk_faults).status();
    if (!status.ok()) {
      // A configuration error stops the process at start: one line, exit 2.
      Log(0, "%s", status.message().c_str());
      _exit(2);
    }
    g_log_level.store(static_cast<int>(parsed.value().verbose), std::memory_order_relaxed);
    pthread_atfork(PrepareFork, AfterForkInParent, ResetInChild);
    return std::move(parsed).value();
  }();
  return options;
}

Runtime* StartedRuntime() {
  return g_init_done.load(std::memory_order_acquire) ? g_runtime.load(std::memory_order_acquire)
                                                     : nullptr;
}

Runtime* ProcessRuntime() {
  if (g_init_done.load(std::memory_order_acquire)) return g_runtime.load(std::memory_order_acquire);
  MutexLock lock(&g_init_mu);
  if (g_init_done.load(std::memory_order_relaxed)) return g_runtime.load(std::memory_order_relaxed);
  const Options& options = ProcessOptions();
  Runtime* rt = nullptr;
  switch (options.backend) {
    case Backend::kSim:
      rt = StartSim(options);
      break;
    case Backend::kHost:
      rt = StartHost(options);
      break;
    case Backend::kAuto:
    case Backend::kCuda:
      rt = StartCuda(options);
      break;
    case Backend::kOff:
      break;
  }
  g_runtime.store(rt, std::memory_order_release);
  g_init_done.store(true, std::memory_order_release);
  if (rt) {
    WipeKeyAtProcessExit();  // a program that links kvtier: before ShutdownAtExit
    atexit(ShutdownAtExit);
  }
  return rt;
}

void WipeKeyAtProcessExit() {
  static std::once_flag once;
  std::call_once(once, [] { on_exit(WipeSpillKeyAtExit, nullptr); });
}

}  // namespace kvtier
