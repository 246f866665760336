// alloc_replay: replays an engine's device allocation sequence
// (alloc_sequences.h) through the real libcudart, from a library named like
// the engine's allocator, and reports which allocations kvtier tiered.
//   alloc_replay vllm|llamacpp|llamacpp-small
// llama.cpp's KV buffer is allocated under a function named as llama.cpp's
// KV cache constructor (replay_malloc_kv), as in the engine.
// Run under LD_PRELOAD=libkvtier.so KVTIER_BACKEND=sim (the ctests set it
// up). An allocation counts as tiered when kvtier_hint finds a region at its
// address. Prints "<role>: tiered N of M" per role and exits 0; exits 1 when
// an allocation fails.
#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "alloc_sequences.h"
#include "kvtier/kvtier.h"

using kvtier::replay::Role;

namespace {

using MallocFn = int (*)(void**, size_t);
using FreeFn = int (*)(void*);
using HintFn = int (*)(const void*, size_t, int);

}  // namespace

int main(int argc, char** argv) {
  const std::string engine = argc > 1 ? argv[1] : "";
  std::vector<kvtier::replay::Step> steps;
  const char* lib_name = nullptr;
  if (engine == "vllm") {
    steps = kvtier::replay::VllmLike();
    lib_name = "libc10_replay.so";
  } else if (engine == "llamacpp") {
    steps = kvtier::replay::LlamaCppLike();
    lib_name = "libggml_replay.so";
  } else if (engine == "llamacpp-small") {
    using kvtier::replay::kMiB;
    steps = kvtier::replay::LlamaCppLike(256 * kMiB, 40 * kMiB, 300 * kMiB);
    lib_name = "libggml_replay.so";
  } else {
    fprintf(stderr, "usage: alloc_replay vllm|llamacpp|llamacpp-small\n");
    return 2;
  }
  // The allocator library sits next to this program.
  std::string dir = argv[0];
  dir = dir.substr(0, dir.rfind('/') + 1);
  void* lib = dlopen((dir + lib_name).c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    fprintf(stderr, "alloc_replay: %s\n", dlerror());
    return 1;
  }
  auto alloc = reinterpret_cast<MallocFn>(dlsym(lib, "replay_malloc"));
  auto alloc_kv =
      engine == "vllm" ? alloc : reinterpret_cast<MallocFn>(dlsym(lib, "replay_malloc_kv"));
  auto release = reinterpret_cast<FreeFn>(dlsym(lib, "replay_free"));
  auto hint = reinterpret_cast<HintFn>(dlsym(RTLD_DEFAULT, "kvtier_hint"));
  if (alloc == nullptr || alloc_kv == nullptr || release == nullptr) return 1;

  std::vector<void*> ptrs(steps.size(), nullptr);
  int tiered[5] = {}, total[5] = {};
  int first_kv = -1, index = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    const kvtier::replay::Step& s = steps[i];
    if (s.free) {
      if (release(ptrs[s.target]) != 0) return 1;
      ptrs[s.target] = nullptr;
      continue;
    }
    if (int e = (s.role == Role::kKv ? alloc_kv : alloc)(&ptrs[i], s.bytes); e != 0) {
      fprintf(stderr, "alloc_replay: allocation %zu (%llu bytes) failed: %d\n", i,
              static_cast<unsigned long long>(s.bytes), e);
      return 1;
    }
    const int role = static_cast<int>(s.role);
    ++total[role];
    // UNPIN changes nothing on an unpinned page; it only says whether the
    // address is inside a region.
    if (hint != nullptr && hint(ptrs[i], 1, KVTIER_HINT_UNPIN) == 0) ++tiered[role];
    if (s.role == Role::kKv && first_kv < 0) first_kv = index;
    ++index;
  }
  printf("first kv allocation: #%d of %d\n", first_kv, index);
  for (int r = 0; r < 5; ++r) {
    if (total[r] == 0) continue;
    printf("%s: tiered %d of %d\n", kvtier::replay::RoleName(static_cast<Role>(r)), tiered[r],
           total[r]);
  }
  for (void* p : ptrs) {
    if (p != nullptr && release(p) != 0) return 1;
  }
  return 0;
}
