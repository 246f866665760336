// heap_hooks: what the heap hooks of libkvtier.so cost every allocation and
// free of a process (KVTIER_BACKEND=host tiers large blocks; every other
// block still passes through kvtier's malloc and free). Run it plain and
// under the preload and compare (scripts/bench-heap-hooks does both):
//   build/tools/perf/heap_hooks
//   LD_PRELOAD=build/libkvtier.so KVTIER_BACKEND=host build/tools/perf/heap_hooks
// Each benchmark allocates and frees blocks of one size in a batch of 64
// (so the allocator's caches work as in a program) and reports ns per
// malloc+free pair; the posix_memalign row is llama.cpp's call; calloc and
// realloc take the same tests in the hooks. glibc's trimming is turned off
// (M_TRIM_THRESHOLD), so that a batch's frees do not give memory back to the
// kernel each round: those system calls would swamp what is measured.
#include <benchmark/benchmark.h>
#include <malloc.h>
#include <stdlib.h>

#include <array>
#include <cstddef>

namespace {

constexpr int kBatch = 64;

// Allocates a batch with `allocate(bytes)`, frees it, again and again.
template <typename Allocate>
void AllocateAndFree(benchmark::State& state, Allocate allocate) {
  const auto bytes = static_cast<size_t>(state.range(0));
  std::array<void*, kBatch> blocks{};
  for (auto _ : state) {
    for (auto& b : blocks) {
      b = allocate(bytes);
      benchmark::DoNotOptimize(b);
    }
    for (void* b : blocks) free(b);
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
  state.counters["ns_per_pair"] =
      benchmark::Counter(static_cast<double>(state.iterations() * kBatch),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void MallocFree(benchmark::State& state) {
  AllocateAndFree(state, [](size_t bytes) { return malloc(bytes); });
}
BENCHMARK(MallocFree)->Arg(16)->Arg(256)->Arg(4096)->Arg(64 << 10);

void PosixMemalignFree(benchmark::State& state) {
  AllocateAndFree(state, [](size_t bytes) {
    void* p = nullptr;
    return posix_memalign(&p, 64, bytes) == 0 ? p : nullptr;
  });
}
BENCHMARK(PosixMemalignFree)->Arg(256)->Arg(4096);

}  // namespace

int main(int argc, char** argv) {
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
