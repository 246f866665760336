// alloc_probe: an LD_PRELOAD library that shows which of a process's large
// heap allocations a KVTIER_MATCH rule would catch, using kvtier's own rule
// parser and call-site lookup (runtime/match.h, runtime/call_site.h). It
// hooks malloc, calloc, posix_memalign, aligned_alloc and memalign, serves
// every call from glibc, and for each of KVTIER_PROBE_MIN_BYTES (default
// 1 MiB) or more writes one line to stderr:
//   alloc_probe: posix_memalign 4194304 bytes: match 1
// The engine test runs llama.cpp under it to check that
// lib~ggml,sym~llama_kv_cacheC finds the KV buffer and nothing else.
// Rule: KVTIER_PROBE_RULE (default "lib~ggml,sym~llama_kv_cacheC"). Not part of kvtier.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <atomic>

#include "runtime/call_site.h"
#include "runtime/match.h"

extern "C" {
void* __libc_malloc(size_t size);
void* __libc_calloc(size_t count, size_t size);
void* __libc_memalign(size_t alignment, size_t size);
}

namespace {

thread_local int t_depth = 0;  // inside the probe: serve from glibc, report nothing
std::atomic<kvtier::MatchRule*> g_rule{nullptr};
std::atomic<bool> g_ready{false};
size_t g_min_bytes = size_t{1} << 20;

__attribute__((constructor)) void Init() {
  ++t_depth;
  const char* rule = getenv("KVTIER_PROBE_RULE");
  kvtier::Result<kvtier::MatchRule> parsed =
      kvtier::MatchRule::Parse(rule && *rule ? rule : "lib~ggml,sym~llama_kv_cacheC");
  if (!parsed.ok()) {
    fprintf(stderr, "alloc_probe: KVTIER_PROBE_RULE: %s\n", parsed.status().message().c_str());
    _exit(2);
  }
  if (const char* min = getenv("KVTIER_PROBE_MIN_BYTES")) g_min_bytes = strtoull(min, nullptr, 10);
  g_rule.store(new kvtier::MatchRule(std::move(parsed).value()));
  g_ready.store(true);
  --t_depth;
}

void Report(const char* api, size_t size, const void* caller) {
  if (size < g_min_bytes || t_depth > 0 || !g_ready.load(std::memory_order_acquire)) return;
  ++t_depth;
  kvtier::CallSite site(caller);
  const bool match = g_rule.load()->Matches(size, 0, site);
  char line[128];
  const int n = snprintf(line, sizeof line, "alloc_probe: %s %zu bytes: match %d\n", api, size,
                         match ? 1 : 0);
  if (n > 0) (void)!write(2, line, static_cast<size_t>(n));
  --t_depth;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) void* malloc(size_t size) {
  void* p = __libc_malloc(size);
  Report("malloc", size, __builtin_return_address(0));
  return p;
}

__attribute__((visibility("default"))) void* calloc(size_t count, size_t size) {
  void* p = __libc_calloc(count, size);
  if (size == 0 || count <= SIZE_MAX / size)
    Report("calloc", count * size, __builtin_return_address(0));
  return p;
}

__attribute__((visibility("default"))) int posix_memalign(void** out, size_t alignment,
                                                          size_t size) {
  if (alignment < sizeof(void*) || (alignment & (alignment - 1)) != 0) return EINVAL;
  void* p = __libc_memalign(alignment, size);
  if (p == nullptr) return ENOMEM;
  *out = p;
  Report("posix_memalign", size, __builtin_return_address(0));
  return 0;
}

__attribute__((visibility("default"))) void* aligned_alloc(size_t alignment, size_t size) {
  void* p = __libc_memalign(alignment, size);
  Report("aligned_alloc", size, __builtin_return_address(0));
  return p;
}

__attribute__((visibility("default"))) void* memalign(size_t alignment, size_t size) {
  void* p = __libc_memalign(alignment, size);
  Report("memalign", size, __builtin_return_address(0));
  return p;
}

}  // extern "C"
