// LaunchScan: see launch_scan.h.
#include "interpose/launch_scan.h"

#include <pthread.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "interpose/hook_table.h"
#include "runtime/clock.h"
#include "runtime/log.h"
#include "runtime/mutex.h"
#include "runtime/runtime.h"
#include "start/process.h"

namespace kvtier::interpose {
namespace {

constexpr int kMaxWords = 64;  // candidate words scanned per launch
constexpr uint64_t kRepeatNs = 1'000'000;

// Where the candidate pointers of one kernel's parameters lie: word w is at
// byte `offset[w]` of parameter `param[w]` (offset from the start of the
// parameter buffer, for `extra` launches, is param_base[param[w]] + offset).
struct Layout {
  int words = 0;
  uint16_t param[kMaxWords];
  uint16_t offset[kMaxWords];      // within the parameter
  uint32_t param_base[kMaxWords];  // the parameter's offset in the buffer
};

std::atomic<uintptr_t> g_lo{UINTPTR_MAX};
std::atomic<uintptr_t> g_hi{0};

Mutex g_mu;
std::unordered_map<uintptr_t, const Layout*>* g_layouts GUARDED_BY(g_mu) = nullptr;  // never freed
std::once_flag g_fork_once;

void LockForFork() ACQUIRE(g_mu) { g_mu.Lock(); }
void UnlockAfterFork() RELEASE(g_mu) { g_mu.Unlock(); }

using ParamInfoFn = CUresult (*)(CUfunction, size_t, size_t*, size_t*);
using FuncBySymbolFn = cudaError_t (*)(cudaFunction_t*, const void*);

ParamInfoFn ParamInfo() {
  static ParamInfoFn fn = [] {
    auto f = reinterpret_cast<ParamInfoFn>(RealDriverSymbol("cuFuncGetParamInfo"));
    if (f == nullptr) {
      Log(1, "launch scanning is off: the CUDA driver has no cuFuncGetParamInfo (CUDA 12.4+)");
    }
    return f;
  }();
  return fn;
}

const Layout* BuildLayout(CUfunction f) {
  auto* layout = new Layout();
  ParamInfoFn info = ParamInfo();
  for (size_t i = 0; info != nullptr && i < 1024 && layout->words < kMaxWords; ++i) {
    size_t offset = 0, size = 0;
    if (info(f, i, &offset, &size) != CUDA_SUCCESS) break;
    for (size_t b = 0; b + 8 <= size && layout->words < kMaxWords; b += 8) {
      layout->param[layout->words] = static_cast<uint16_t>(i);
      layout->offset[layout->words] = static_cast<uint16_t>(b);
      layout->param_base[layout->words] = static_cast<uint32_t>(offset);
      ++layout->words;
    }
  }
  return layout;
}

// The layout of the kernel keyed by `key` (the CUfunction, or a runtime
// launch's host stub); `get_function` gives its driver handle, and is called
// only when the layout is not cached yet. Per-thread direct-mapped cache in
// front of the shared table.
template <typename GetFunction>
const Layout* LayoutFor(uintptr_t key, GetFunction&& get_function) {
  struct Slot {
    uintptr_t key;
    const Layout* layout;
  };
  [[gnu::tls_model("initial-exec")]] static constinit thread_local Slot t_cache[16] = {};
  Slot& slot = t_cache[(key >> 4) & 15];
  if (slot.key == key && slot.layout != nullptr) return slot.layout;
  std::call_once(g_fork_once,
                 [] { pthread_atfork(LockForFork, UnlockAfterFork, UnlockAfterFork); });
  const Layout* layout = nullptr;
  {
    MutexLock lock(&g_mu);
    if (g_layouts == nullptr) g_layouts = new std::unordered_map<uintptr_t, const Layout*>();
    auto it = g_layouts->find(key);
    if (it != g_layouts->end()) layout = it->second;
  }
  if (layout == nullptr) {
    // Built outside the lock: it calls into the driver. Racing threads may
    // both build one; the first stored wins and the other is dropped.
    CUfunction f = get_function();
    static const Layout kNone{};
    if (f == nullptr) return &kNone;  // not cached: the next launch tries again
    const Layout* built = BuildLayout(f);
    MutexLock lock(&g_mu);
    auto [it, inserted] = g_layouts->emplace(key, built);
    if (!inserted) delete built;
    layout = it->second;
  }
  slot = {key, layout};
  return layout;
}

// Pushes a kLaunch signal for the region holding `addr`, unless this thread
// reported it within kRepeatNs.
void Report(Runtime* rt, uintptr_t addr, uint64_t now) {
  struct Recent {
    RegionId region;
    uint64_t at_ns;
  };
  [[gnu::tls_model("initial-exec")]] static constinit thread_local Recent t_recent[8] = {};
  RegionPtr r = rt->regions().Find(addr);
  if (r == nullptr) return;
  Recent& recent = t_recent[r->id & 7];
  if (recent.region == r->id && now - recent.at_ns < kRepeatNs) return;
  recent = {r->id, now};
  Signal s;
  s.kind = SignalKind::kLaunch;
  s.region = r->id;
  s.page = 0;
  s.pages = static_cast<uint32_t>(r->pages.size());
  s.time_ns = now;
  rt->PushSignal(s);
}

// Reads the candidate words of a launch and reports the regions they hit.
void Scan(const Layout& layout, void** params, const uint8_t* buffer, size_t buffer_bytes) {
  const uintptr_t lo = g_lo.load(std::memory_order_relaxed);
  const uintptr_t hi = g_hi.load(std::memory_order_relaxed);
  Runtime* rt = ProcessRuntime();
  if (rt == nullptr) return;
  uint64_t now = 0;
  for (int w = 0; w < layout.words; ++w) {
    const uint8_t* at;
    if (params != nullptr) {
      at = static_cast<const uint8_t*>(params[layout.param[w]]);
      if (at == nullptr) continue;
      at += layout.offset[w];
    } else {
      size_t off = size_t{layout.param_base[w]} + layout.offset[w];
      if (off + 8 > buffer_bytes) continue;
      at = buffer + off;
    }
    uintptr_t value;
    memcpy(&value, at, sizeof value);  // parameters need not be 8-byte aligned
    if (value < lo || value >= hi) continue;
    if (now == 0) now = MonotonicNs();
    Report(rt, value, now);
  }
}

bool NoRegions() { return g_hi.load(std::memory_order_relaxed) == 0; }

}  // namespace

void NoteRegionRange(const void* base, size_t size) {
  const uintptr_t lo = reinterpret_cast<uintptr_t>(base);
  const uintptr_t hi = lo + size;
  uintptr_t cur = g_lo.load(std::memory_order_relaxed);
  while (lo < cur && !g_lo.compare_exchange_weak(cur, lo, std::memory_order_relaxed)) {
  }
  cur = g_hi.load(std::memory_order_relaxed);
  while (hi > cur && !g_hi.compare_exchange_weak(cur, hi, std::memory_order_relaxed)) {
  }
}

namespace {

void WarnScanFailed(const char* what) {
  static std::atomic<bool> warned{false};
  WarnOnce(&warned, "launch scanning: %s; launches are not scanned (later failures not printed)",
           what);
}

// The scans below catch everything: a launch hook must never throw into the
// program, and a launch that was not scanned is only evidence lost.
void ScanDriverLaunchOrThrow(CUfunction f, void** params, void** extra) {
  const Layout* layout = LayoutFor(reinterpret_cast<uintptr_t>(f), [f] { return f; });
  if (layout->words == 0) return;
  if (params != nullptr) {
    Scan(*layout, params, nullptr, 0);
    return;
  }
  // extra: {CU_LAUNCH_PARAM_BUFFER_POINTER, buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, END}
  const uint8_t* buffer = nullptr;
  size_t bytes = 0;
  for (int i = 0; extra != nullptr && i < 16 && extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
    if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
      buffer = static_cast<const uint8_t*>(extra[i + 1]);
    if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE && extra[i + 1] != nullptr)
      memcpy(&bytes, extra[i + 1], sizeof bytes);
  }
  if (buffer != nullptr) Scan(*layout, nullptr, buffer, bytes);
}

void ScanRuntimeLaunchOrThrow(const void* func, void** args) {
  const Layout* layout = LayoutFor(reinterpret_cast<uintptr_t>(func), [func]() -> CUfunction {
    // The layout depends on the kernel only, so the host stub is the key and
    // the driver handle is looked up once per kernel. A failed lookup would
    // become the thread's sticky runtime error: look up only when none is
    // pending, and clear ours.
    using PeekFn = cudaError_t (*)();
    static auto by_symbol =
        reinterpret_cast<FuncBySymbolFn>(RealRuntimeSymbol("cudaGetFuncBySymbol"));
    auto peek = reinterpret_cast<PeekFn>(ResolveReal(HookId::cudaPeekAtLastError));
    auto take = reinterpret_cast<PeekFn>(ResolveReal(HookId::cudaGetLastError));
    if (by_symbol == nullptr || peek == nullptr || take == nullptr || peek() != cudaSuccess) {
      return nullptr;
    }
    cudaFunction_t f = nullptr;
    if (by_symbol(&f, func) != cudaSuccess) {
      take();
      return nullptr;
    }
    return reinterpret_cast<CUfunction>(f);
  });
  if (layout->words != 0) Scan(*layout, args, nullptr, 0);
}

}  // namespace

void ScanDriverLaunch(CUfunction f, void** params, void** extra) {
  if (NoRegions() || f == nullptr) return;
  try {
    ScanDriverLaunchOrThrow(f, params, extra);
  } catch (const std::exception& e) {
    WarnScanFailed(e.what());
  } catch (...) {
    WarnScanFailed("unknown exception");
  }
}

void ScanRuntimeLaunch(const void* func, void** args) {
  if (NoRegions() || func == nullptr || args == nullptr) return;
  try {
    ScanRuntimeLaunchOrThrow(func, args);
  } catch (const std::exception& e) {
    WarnScanFailed(e.what());
  } catch (...) {
    WarnScanFailed("unknown exception");
  }
}

}  // namespace kvtier::interpose
