// CudartCommon: see cudart_common.h.
#include "interpose/cudart_common.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>

#include "runtime/log.h"
#include "start/process.h"

namespace kvtier::interpose {
namespace {

std::atomic<SimCudaRuntime*> g_sim{nullptr};

void SimPrepareFork() {
  if (SimCudaRuntime* g = g_sim.load(std::memory_order_acquire)) g->LockForFork();
}
void SimAfterFork() {
  if (SimCudaRuntime* g = g_sim.load(std::memory_order_acquire)) g->UnlockAfterFork();
}

}  // namespace

SimCudaRuntime& TheSimCudaRuntime() {
  static SimCudaRuntime* gpu = [] {
    const Options& o = ProcessOptions();
    auto* g = new SimCudaRuntime(o.sim_device_name, o.sim_device_memory);
    g_sim.store(g, std::memory_order_release);
    // The child keeps the parent's plain allocations (copy-on-write memory,
    // still valid there); only the locks need care.
    pthread_atfork(SimPrepareFork, SimAfterFork, SimAfterFork);
    return g;
  }();
  return *gpu;
}

PlainAllocations& RealPlainAllocations() {
  // Never destroyed, see the header. Only used in kTier mode, where a fork
  // child cannot use the parent's CUDA context anyway.
  static PlainAllocations* table = new PlainAllocations();
  return *table;
}

RegionPtr RegionCovering(Runtime* rt, const void* p, size_t n) {
  if (rt == nullptr) return nullptr;
  uintptr_t addr = reinterpret_cast<uintptr_t>(p);
  RegionPtr r = rt->regions().Find(addr);
  if (r == nullptr || n > r->base + r->size - addr) return nullptr;
  return r;
}

uint64_t RegionDeviceReserve(Runtime* rt) {
  if (rt == nullptr) return 0;
  Counters& c = rt->counters();
  return std::min(Counters::Get(c.region_bytes), Counters::Get(c.device_budget_bytes));
}

uint64_t OversubscribedBytes(Runtime* rt) {
  if (rt == nullptr || rt->options().oversubscribe <= 0) return 0;
  Counters& c = rt->counters();
  double below =
      static_cast<double>(Counters::Get(c.host_budget_bytes) + Counters::Get(c.disk_budget_bytes));
  return static_cast<uint64_t>(rt->options().oversubscribe * below);
}

bool SimDeviceRange(Runtime* rt, const void* p, size_t n) {
  return TheSimCudaRuntime().memory().Contains(p, n) || RegionCovering(rt, p, n) != nullptr;
}

void WarnInternalError(const char* what) {
  static std::atomic<bool> warned{false};
  WarnOnce(&warned,
           "internal error in a CUDA hook: %s; the call returned cudaErrorUnknown (later errors "
           "are not printed)",
           what);
}

}  // namespace kvtier::interpose
