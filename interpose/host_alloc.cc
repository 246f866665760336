// HostAlloc: the heap hooks of KVTIER_BACKEND=host (malloc, calloc,
// posix_memalign, aligned_alloc, memalign, valloc, pvalloc, realloc, free,
// malloc_usable_size), which make a CPU engine's large heap blocks, such as
// llama.cpp's KV cache, tiered regions of the host backend.
//
// Every allocation and free of the process comes through here, so the paths
// for blocks that are not kvtier's cost almost nothing:
//  - an allocation below the threshold (the smallest size KVTIER_MATCH can
//    accept, at least one page; the largest size_t when the backend is not
//    host) goes to the next allocator after one compare;
//  - free() of a pointer outside the VaRange (va_range.h) goes to the next
//    free after one range compare: no lock, no allocation, O(1).
// An allocation at or above the threshold asks the runtime (KVTIER_MATCH);
// a matched one becomes a region whose view lies in the VaRange, page
// aligned (any alignment up to the page size holds) and zero-filled on first
// touch (calloc's promise holds too). Calls kvtier makes itself (inside a
// hook, or on a kvtier thread) go straight to the next allocator.
//
// "Next allocator" is whatever follows libkvtier.so in the lookup order
// (glibc's; an allocator the program links would be it: not tried yet), found with
// dlsym(RTLD_NEXT) on first use. dlsym may allocate while it resolves; those
// few allocations come from a small static arena whose frees are no-ops.
// A tiered block behaves as the heap's would: realloc keeps it in place when
// it shrinks or stays within its pages, and otherwise moves it to a plain
// block of the next allocator (copying its bytes, restored from SSD where
// spilled); malloc_usable_size gives its whole pages; a free() of a pointer
// inside the range that is no block's start is counted in bad_frees and
// warned once, not passed on (the next allocator would abort on it).
// The fast paths are not sanitizer-instrumented: they run before the
// sanitizer runtimes have started (runtime/not_sanitized.h). So they touch
// only plain variables through the __atomic builtins and call only
// functions built the same way: the compiler does not inline an
// instrumented function (std::atomic's members, std::max) into one that is
// not, and such a call would reach the sanitizer before it exists.
// Thread-safety: any thread.
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "interpose/preload.h"
#include "runtime/allocation_matcher.h"
#include "runtime/internal_thread.h"
#include "runtime/log.h"
#include "runtime/not_sanitized.h"
#include "runtime/runtime.h"
#include "runtime/va_range.h"
#include "start/process.h"

#define KVTIER_HEAP_EXPORT extern "C" __attribute__((visibility("default"))) KVTIER_NOT_SANITIZED

namespace kvtier::interpose {
namespace {

// noexcept, as the C library declares them: a call through one can then be
// a tail jump.
struct NextHeap {
  void* (*malloc)(size_t) noexcept;
  void (*free)(void*) noexcept;
  void* (*calloc)(size_t, size_t) noexcept;
  void* (*realloc)(void*, size_t) noexcept;
  int (*posix_memalign)(void**, size_t, size_t) noexcept;
  void* (*aligned_alloc)(size_t, size_t) noexcept;
  void* (*memalign)(size_t, size_t) noexcept;
  void* (*valloc)(size_t) noexcept;
  void* (*pvalloc)(size_t) noexcept;
  size_t (*malloc_usable_size)(void*) noexcept;
};

// Plain variables read and written with the __atomic builtins (see top).
constinit NextHeap g_next{};
constinit bool g_resolved = false;  // g_next is filled in (release/acquire)
[[gnu::tls_model("initial-exec")]] constinit thread_local bool t_resolving = false;

// Sizes at or above this ask the runtime; the largest size_t: never.
constinit size_t g_threshold = SIZE_MAX;

KVTIER_NOT_SANITIZED inline bool Resolved() {
  return __atomic_load_n(&g_resolved, __ATOMIC_ACQUIRE);
}
KVTIER_NOT_SANITIZED inline size_t Threshold() {
  return __atomic_load_n(&g_threshold, __ATOMIC_RELAXED);
}

// The arena that serves dlsym's allocations while the next functions are
// looked up (a few small blocks, once per process).
constexpr size_t kArenaBytes = 64 * 1024;
alignas(64) constinit unsigned char g_arena[kArenaBytes];
constinit size_t g_arena_used = 0;

KVTIER_NOT_SANITIZED inline bool InArena(const void* p) {
  return reinterpret_cast<uintptr_t>(p) - reinterpret_cast<uintptr_t>(g_arena) < kArenaBytes;
}

KVTIER_NOT_SANITIZED void* ArenaAlloc(size_t bytes, size_t align) {
  if (align < 16) align = 16;
  size_t used = __atomic_load_n(&g_arena_used, __ATOMIC_RELAXED);
  for (;;) {
    const size_t start = (used + align - 1) & ~(align - 1);
    if (start > kArenaBytes || kArenaBytes - start < bytes) return nullptr;
    if (__atomic_compare_exchange_n(&g_arena_used, &used, start + bytes, true, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED)) {
      return g_arena + start;
    }
  }
}

template <typename Fn>
KVTIER_NOT_SANITIZED void Lookup(Fn* out, const char* name) {
  *out = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}

// False while this thread is resolving (its allocations then use the arena).
[[gnu::noinline, gnu::cold]] KVTIER_NOT_SANITIZED bool Resolve() {
  if (Resolved()) return true;
  if (t_resolving) return false;
  t_resolving = true;
  NextHeap next{};
  Lookup(&next.malloc, "malloc");
  Lookup(&next.free, "free");
  Lookup(&next.calloc, "calloc");
  Lookup(&next.realloc, "realloc");
  Lookup(&next.posix_memalign, "posix_memalign");
  Lookup(&next.aligned_alloc, "aligned_alloc");
  Lookup(&next.memalign, "memalign");
  Lookup(&next.valloc, "valloc");
  Lookup(&next.pvalloc, "pvalloc");
  Lookup(&next.malloc_usable_size, "malloc_usable_size");
  t_resolving = false;
  if (next.malloc == nullptr || next.free == nullptr) return false;  // cannot happen with a libc
  g_next = next;  // racing resolvers store the same pointers
  __atomic_store_n(&g_resolved, true, __ATOMIC_RELEASE);
  return true;
}

// The next allocator's functions; nullptr while this thread resolves them.
KVTIER_NOT_SANITIZED inline const NextHeap* Next() {
  if (Resolved()) [[likely]]
    return &g_next;
  return Resolve() ? &g_next : nullptr;
}

std::atomic<bool> g_bad_free_warned{false};
std::atomic<bool> g_region_failure_warned{false};

// The slow path of every allocation hook: a tiered block when the caller is
// not kvtier and KVTIER_MATCH takes it. nullptr: allocate plain.
void* TryTier(size_t bytes, size_t align, const char* api, const void* caller) {
  if (t_hook_depth != 0 || t_kvtier_thread) return nullptr;
  HookScope scope;
  Runtime* rt = ProcessRuntime();
  if (rt == nullptr || align > rt->options().page_size) return nullptr;
  if (!rt->ShouldTier(bytes, caller, api)) return nullptr;
  Result<void*> region = rt->CreateRegion(bytes, caller);
  if (region.ok()) return region.value();
  WarnOnce(&g_region_failure_warned,
           "%s(%zu bytes): cannot create a tiered block: %s; allocating it plain instead "
           "(later failures are not printed)",
           api, bytes, region.status().message().c_str());
  return nullptr;
}

// A free() of a pointer inside the range.
void FreeTiered(void* p) {
  HookScope scope;
  if (VaRange::Process().FreePlain(p)) return;  // a fork child's copy
  Runtime* rt = ProcessRuntime();
  if (rt != nullptr && rt->FreeRegion(p)) return;
  if (rt) Counters::Add(rt->counters().bad_frees);
  WarnOnce(&g_bad_free_warned,
           "free(%p): inside kvtier's tiered blocks but no block's start (freed twice, or an "
           "interior pointer); ignored (later bad frees are counted in bad_frees, not printed)",
           p);
}

// The bytes a tiered block spans (whole pages), or 0 when `p` starts none.
size_t TieredBytes(const void* p) {
  HookScope scope;
  if (size_t plain = VaRange::Process().PlainBytes(p); plain != 0) return plain;
  Runtime* rt = ProcessRuntime();
  if (rt == nullptr) return 0;
  RegionPtr r = rt->regions().Find(reinterpret_cast<uintptr_t>(p));
  if (!r || r->base != reinterpret_cast<uintptr_t>(p)) return 0;
  return r->pages.size() * r->page_size;
}

void* ReallocTiered(void* p, size_t bytes) {
  if (bytes == 0) {  // glibc: frees and returns null
    FreeTiered(p);
    return nullptr;
  }
  const size_t have = TieredBytes(p);
  if (have == 0) {
    FreeTiered(p);  // counts and warns
    errno = EINVAL;
    return nullptr;
  }
  if (bytes <= have) return p;
  const NextHeap* next = Next();
  void* moved = next ? next->malloc(bytes) : nullptr;
  if (moved == nullptr) return nullptr;  // errno from malloc; the block is kept
  memcpy(moved, p, have);
  FreeTiered(p);
  return moved;
}

KVTIER_NOT_SANITIZED inline bool ValidAlignment(size_t align) {
  return align != 0 && (align & (align - 1)) == 0;
}

// Runs when the loader is done: sets the threshold when the backend is host,
// and says so when another allocator's functions come first (a sanitizer's
// runtime, say), so that nothing could be tiered.
__attribute__((constructor)) void InitHostHeap() {
  HookScope scope;
  const Options& options = ProcessOptions();
  if (options.backend != kvtier::Backend::kHost) return;
  Result<AllocationMatcher> match = AllocationMatcher::Parse(options.match);
  if (!match.ok()) return;  // ProcessOptions has already stopped the process
  if (dlsym(RTLD_DEFAULT, "malloc") != reinterpret_cast<void*>(&::malloc)) {
    Log(0,
        "KVTIER_BACKEND=host: the program's malloc is not kvtier's (another allocator "
        "comes first in the lookup order); no heap block will be tiered");
    return;
  }
  const size_t least = std::max<uint64_t>(match.value().min_size(), options.page_size);
  __atomic_store_n(&g_threshold, least, __ATOMIC_RELAXED);
  Log(1, "host backend: heap blocks of %zu bytes or more are matched against KVTIER_MATCH", least);
}

}  // namespace
}  // namespace kvtier::interpose

using kvtier::VaRange;
using kvtier::interpose::Next;
using kvtier::interpose::NextHeap;
using kvtier::interpose::Threshold;

namespace kvtier::interpose {
namespace {

// The slow paths of malloc and free, out of line so that theirs are a
// compare and a jump to the next allocator.
[[gnu::noinline]] KVTIER_NOT_SANITIZED void* MallocSlow(size_t bytes, const void* caller) {
  if (bytes >= Threshold()) {
    if (void* p = TryTier(bytes, 1, "malloc", caller)) return p;
  }
  const NextHeap* next = Next();
  return next ? next->malloc(bytes) : ArenaAlloc(bytes, 16);
}

[[gnu::noinline]] KVTIER_NOT_SANITIZED void FreeSlow(void* p) {
  if (VaRange::Process().Contains(p)) {
    FreeTiered(p);
    return;
  }
  if (InArena(p)) return;
  if (const NextHeap* next = Next()) next->free(p);
}

}  // namespace
}  // namespace kvtier::interpose

KVTIER_HEAP_EXPORT void* malloc(size_t bytes) noexcept {
  if (bytes < Threshold() && kvtier::interpose::Resolved()) [[likely]] {
    return kvtier::interpose::g_next.malloc(bytes);
  }
  return kvtier::interpose::MallocSlow(bytes, __builtin_return_address(0));
}

KVTIER_HEAP_EXPORT void free(void* p) noexcept {
  // Arena blocks lie outside the range; Contains is false before Reserve.
  if (!VaRange::Process().Contains(p) && !kvtier::interpose::InArena(p) &&
      kvtier::interpose::Resolved()) [[likely]] {
    kvtier::interpose::g_next.free(p);
    return;
  }
  kvtier::interpose::FreeSlow(p);
}

namespace kvtier::interpose {
namespace {

[[gnu::noinline]] KVTIER_NOT_SANITIZED void* CallocSlow(size_t count, size_t size,
                                                        const void* caller) {
  size_t bytes = 0;
  if (__builtin_mul_overflow(count, size, &bytes)) {
    errno = ENOMEM;
    return nullptr;
  }
  if (bytes >= Threshold()) {
    if (void* p = TryTier(bytes, 1, "calloc", caller)) return p;  // untouched pages read as zeros
  }
  if (const NextHeap* next = Next()) return next->calloc(count, size);
  return ArenaAlloc(bytes, 16);  // static storage: zeros
}

[[gnu::noinline]] KVTIER_NOT_SANITIZED void* ReallocSlow(void* p, size_t bytes) {
  if (VaRange::Process().Contains(p)) return ReallocTiered(p, bytes);
  const NextHeap* next = Next();
  if (InArena(p)) {  // out of the arena, into the heap
    void* moved = next ? next->malloc(bytes) : ArenaAlloc(bytes, 16);
    if (moved && p) {
      const size_t room =
          static_cast<size_t>(g_arena + kArenaBytes - static_cast<unsigned char*>(p));
      memcpy(moved, p, bytes < room ? bytes : room);
    }
    return moved;
  }
  return next ? next->realloc(p, bytes) : nullptr;
}

[[gnu::noinline]] KVTIER_NOT_SANITIZED int PosixMemalignSlow(void** out, size_t align, size_t bytes,
                                                             const void* caller) {
  if (bytes >= Threshold() && ValidAlignment(align) && align % sizeof(void*) == 0) {
    if (void* p = TryTier(bytes, align, "posix_memalign", caller)) {
      *out = p;
      return 0;
    }
  }
  if (const NextHeap* next = Next()) return next->posix_memalign(out, align, bytes);
  void* p = ArenaAlloc(bytes, align);
  if (p == nullptr) return ENOMEM;
  *out = p;
  return 0;
}

}  // namespace
}  // namespace kvtier::interpose

KVTIER_HEAP_EXPORT void* calloc(size_t count, size_t size) noexcept {
  size_t bytes = 0;
  if (!__builtin_mul_overflow(count, size, &bytes) && bytes < Threshold() &&
      kvtier::interpose::Resolved()) [[likely]] {
    return kvtier::interpose::g_next.calloc(count, size);
  }
  return kvtier::interpose::CallocSlow(count, size, __builtin_return_address(0));
}

KVTIER_HEAP_EXPORT void* realloc(void* p, size_t bytes) noexcept {
  if (!VaRange::Process().Contains(p) && !kvtier::interpose::InArena(p) &&
      kvtier::interpose::Resolved()) [[likely]] {
    return kvtier::interpose::g_next.realloc(p, bytes);
  }
  return kvtier::interpose::ReallocSlow(p, bytes);
}

KVTIER_HEAP_EXPORT int posix_memalign(void** out, size_t align, size_t bytes) noexcept {
  if (bytes < Threshold() && kvtier::interpose::Resolved()) [[likely]] {
    return kvtier::interpose::g_next.posix_memalign(out, align, bytes);
  }
  return kvtier::interpose::PosixMemalignSlow(out, align, bytes, __builtin_return_address(0));
}

namespace kvtier::interpose {
namespace {

// The aligned allocations kvtier sees seldom (aligned_alloc, memalign,
// valloc, pvalloc): a tiered block when large and matched; nullptr: the
// caller allocates with the next allocator.
KVTIER_NOT_SANITIZED inline void* TierIfLarge(size_t bytes, size_t align, const char* api,
                                              const void* caller) {
  if (bytes < Threshold() || !ValidAlignment(align)) [[likely]]
    return nullptr;
  return TryTier(bytes, align, api, caller);
}

}  // namespace
}  // namespace kvtier::interpose

KVTIER_HEAP_EXPORT void* aligned_alloc(size_t align, size_t bytes) noexcept {
  const void* caller = __builtin_return_address(0);
  if (void* p = kvtier::interpose::TierIfLarge(bytes, align, "aligned_alloc", caller)) return p;
  const NextHeap* next = Next();
  return next ? next->aligned_alloc(align, bytes) : kvtier::interpose::ArenaAlloc(bytes, align);
}

KVTIER_HEAP_EXPORT void* memalign(size_t align, size_t bytes) noexcept {
  const void* caller = __builtin_return_address(0);
  if (void* p = kvtier::interpose::TierIfLarge(bytes, align, "memalign", caller)) return p;
  const NextHeap* next = Next();
  return next ? next->memalign(align, bytes) : kvtier::interpose::ArenaAlloc(bytes, align);
}

KVTIER_HEAP_EXPORT void* valloc(size_t bytes) noexcept {
  const void* caller = __builtin_return_address(0);
  if (void* p = kvtier::interpose::TierIfLarge(bytes, 4096, "valloc", caller)) return p;
  const NextHeap* next = Next();
  return next ? next->valloc(bytes) : kvtier::interpose::ArenaAlloc(bytes, 4096);
}

KVTIER_HEAP_EXPORT void* pvalloc(size_t bytes) noexcept {
  const void* caller = __builtin_return_address(0);
  if (void* p = kvtier::interpose::TierIfLarge(bytes, 4096, "pvalloc", caller)) return p;
  const NextHeap* next = Next();
  return next ? next->pvalloc(bytes) : kvtier::interpose::ArenaAlloc(bytes, 4096);
}

KVTIER_HEAP_EXPORT size_t malloc_usable_size(void* p) noexcept {
  if (VaRange::Process().Contains(p)) [[unlikely]]
    return kvtier::interpose::TieredBytes(p);
  if (p == nullptr || kvtier::interpose::InArena(p)) return 0;
  const NextHeap* next = Next();
  return next && next->malloc_usable_size ? next->malloc_usable_size(p) : 0;
}

// memset: a clear of a tiered block leaves its never-touched pages as they
// are. They read as zeros already; an engine clears its KV buffer once it
// has it (llama.cpp: hundreds of MiB, GiB for long contexts), and under a
// small budget every page of it would fault in and leave again as zeros.
// Every memset of the process comes through here: one compare for a value
// other than zero or a size below a page, one range compare for the rest,
// then a tail jump to the C library's. Not in the sanitizer builds, whose
// runtimes intercept memset themselves.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define KVTIER_HOOK_MEMSET 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define KVTIER_HOOK_MEMSET 0
#endif
#endif
#ifndef KVTIER_HOOK_MEMSET
#define KVTIER_HOOK_MEMSET 1
#endif

#if KVTIER_HOOK_MEMSET
namespace kvtier::interpose {
namespace {

using MemsetFn = void* (*)(void*, int, size_t) noexcept;
constinit MemsetFn g_next_memset = nullptr;  // __atomic builtins, as g_next
[[gnu::tls_model("initial-exec")]] constinit thread_local bool t_memset_resolving = false;

// Until the C library's memset is known, and while this thread looks it up:
// a byte at a time (volatile stores: the compiler must not make this loop a
// call to memset).
KVTIER_NOT_SANITIZED void* MemsetBytes(void* dst, int c, size_t n) noexcept {
  auto* p = static_cast<volatile unsigned char*>(dst);
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<unsigned char>(c);
  return dst;
}

[[gnu::noinline, gnu::cold]] KVTIER_NOT_SANITIZED MemsetFn ResolveMemset() {
  if (t_memset_resolving) return MemsetBytes;
  t_memset_resolving = true;
  MemsetFn next = nullptr;
  Lookup(&next, "memset");
  t_memset_resolving = false;
  if (next == nullptr) return MemsetBytes;
  __atomic_store_n(&g_next_memset, next, __ATOMIC_RELEASE);
  return next;
}

KVTIER_NOT_SANITIZED inline MemsetFn NextMemset() {
  MemsetFn next = __atomic_load_n(&g_next_memset, __ATOMIC_ACQUIRE);
  if (next != nullptr) [[likely]]
    return next;
  return ResolveMemset();
}

// Zeros over [dst, dst + n), which starts in the range: whole pages of a
// block that were never touched (no bytes anywhere: they read as zeros) are
// skipped, the rest is set. A page being populated meanwhile gets zeros
// either way; a write racing with the clear races with it in the program.
// Never starts the runtime: a block in the range exists only once it has
// (a fork child keeps the range, with plain copies, and no runtime yet).
[[gnu::noinline]] void* ClearInRange(void* dst, size_t n, MemsetFn next) {
  if (t_hook_depth != 0 || t_kvtier_thread) return next(dst, 0, n);
  HookScope scope;
  Runtime* rt = StartedRuntime();
  if (rt == nullptr) return next(dst, 0, n);
  uintptr_t at = reinterpret_cast<uintptr_t>(dst);
  const uintptr_t end = at + n;
  while (at < end) {
    RegionPtr r = rt->regions().Find(at);
    if (!r) {  // not in a block (a fork child's plain copy, or a gap)
      next(reinterpret_cast<void*>(at), 0, end - at);
      break;
    }
    const uintptr_t block_end =
        std::min<uintptr_t>(end, r->PageAddr(static_cast<uint32_t>(r->pages.size())));
    uintptr_t set_from = at;  // the start of a run of pages to set
    // A block no longer tracked (degraded) is set whole.
    while (at < block_end && !r->untracked.load(std::memory_order_acquire)) {
      const uint32_t p = r->PageOf(at);
      const uintptr_t page_end = r->PageAddr(p) + r->page_size;
      const uintptr_t stop = std::min(page_end, block_end);
      const PageRecord& rec = r->pages[p];
      const bool zeros = at == r->PageAddr(p) && stop == page_end &&
                         rec.tier.load(std::memory_order_acquire) == Tier::kUntouched &&
                         !(rec.flags.load(std::memory_order_acquire) & kPageInFlight);
      if (zeros) {
        if (set_from < at) next(reinterpret_cast<void*>(set_from), 0, at - set_from);
        set_from = stop;
      }
      at = stop;
    }
    at = block_end;
    if (set_from < at) next(reinterpret_cast<void*>(set_from), 0, at - set_from);
  }
  return dst;
}

}  // namespace
}  // namespace kvtier::interpose

KVTIER_HEAP_EXPORT void* memset(void* dst, int c, size_t n) noexcept {
  const kvtier::interpose::MemsetFn next = kvtier::interpose::NextMemset();
  if (c != 0 || n < 4096 || !VaRange::Process().Contains(dst)) [[likely]]
    return next(dst, c, n);
  return kvtier::interpose::ClearInRange(dst, n, next);
}
#endif  // KVTIER_HOOK_MEMSET
