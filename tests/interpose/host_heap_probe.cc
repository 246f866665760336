// host_heap_probe: a CPU "engine" whose large heap blocks KVTIER_BACKEND=host
// tiers, checking that each behaves as the heap's would.
//
//   host_heap_probe [--blocks N] [--block-mib M] [--rounds R] [--threads T] [--bad-frees]
//                   [--hold] [--rounds-only]
//   host_heap_probe --clears N [--block-mib M]
//
// Each of T threads allocates N blocks of M MiB through a different function
// of the malloc family, fills them with a pattern of its own, then reads and
// rewrites every block R times in turn (more than a tight resident budget
// holds, so pages leave for SSD and come back), checking every word. Then,
// on the main thread: calloc reads as zeros; realloc keeps the bytes when it
// shrinks and when it grows; malloc_usable_size covers the request; a forked
// child sees its parent's bytes, spilled pages included, and its writes stay
// its own; with --bad-frees, a second free of a block and a free of an
// interior pointer are survived. --hold keeps blocks alive, prints
// "host_heap_probe: holding" and waits for a line on stdin first (for the
// tools). --clears N checks only memset over a block of M MiB (Clears).
// --rounds-only stops after the threads' rounds.
// Prints "host_heap_probe: OK" and exits 0, or names the first
// difference and exits 1.
// Thread-safety: each thread owns its blocks.
#include <malloc.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

std::atomic<int> g_failures{0};

uint64_t Word(uint64_t seed, uint64_t i) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + i;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  return x ^ (x >> 29);
}

void Fill(void* p, size_t bytes, uint64_t seed) {
  auto* w = static_cast<uint64_t*>(p);
  for (size_t i = 0; i < bytes / 8; ++i) w[i] = Word(seed, i);
}

bool Check(const void* p, size_t bytes, uint64_t seed, const char* what) {
  const auto* w = static_cast<const uint64_t*>(p);
  for (size_t i = 0; i < bytes / 8; ++i) {
    if (w[i] != Word(seed, i)) {
      fprintf(stderr, "host_heap_probe: %s: word %zu is %016" PRIx64 ", want %016" PRIx64 "\n",
              what, i, w[i], Word(seed, i));
      g_failures.fetch_add(1);
      return false;
    }
  }
  return true;
}

// One block through the allocation function `kind` picks.
void* Allocate(int kind, size_t bytes) {
  void* p = nullptr;
  switch (kind % 4) {
    case 0:
      if (posix_memalign(&p, 64, bytes) != 0) p = nullptr;
      break;
    case 1:
      p = malloc(bytes);
      break;
    case 2:
      p = aligned_alloc(4096, bytes);
      break;
    default:
      p = memalign(256, bytes);
      break;
  }
  return p;
}

void Worker(int thread, int blocks, size_t bytes, int rounds) {
  std::vector<void*> mine(static_cast<size_t>(blocks));
  std::vector<uint64_t> seeds(mine.size());
  for (int b = 0; b < blocks; ++b) {
    mine[b] = Allocate(thread + b, bytes);
    if (mine[b] == nullptr) {
      fprintf(stderr, "host_heap_probe: thread %d: allocation %d failed\n", thread, b);
      g_failures.fetch_add(1);
      return;
    }
    seeds[b] = uint64_t(thread) << 32 | uint64_t(b);
    Fill(mine[b], bytes, seeds[b]);
  }
  for (int r = 0; r < rounds; ++r) {
    for (int b = 0; b < blocks; ++b) {
      std::string what = "thread " + std::to_string(thread) + " block " + std::to_string(b) +
                         " round " + std::to_string(r);
      if (!Check(mine[b], bytes, seeds[b], what.c_str())) return;
      seeds[b] += 1000003;
      Fill(mine[b], bytes, seeds[b]);
    }
  }
  for (void* p : mine) free(p);
}

// Through a pointer, as a library calls it (a memset right after a malloc
// may otherwise become a calloc).
void* (*volatile g_memset)(void*, int, size_t) = memset;

bool AllZero(const uint8_t* p, size_t bytes, const char* what) {
  for (size_t i = 0; i < bytes; ++i) {
    if (p[i] != 0) {
      fprintf(stderr, "host_heap_probe: %s: byte %zu is %u, want 0\n", what, i, p[i]);
      g_failures.fetch_add(1);
      return false;
    }
  }
  return true;
}

// --clears N: a block cleared N times with memset, as an engine clears its
// KV buffer once it has it; then it reads as zeros where it was never
// written, a clear with ragged edges over written bytes sets exactly its
// bytes, and a memset of another value sets it.
void Clears(size_t bytes, int clears) {
  auto* block = static_cast<uint8_t*>(malloc(bytes));
  for (int i = 0; i < clears; ++i) g_memset(block, 0, bytes);
  AllZero(block, 4096, "cleared block, first page");
  AllZero(block + bytes / 2, 4096, "cleared block, middle");
  AllZero(block + bytes - 4096, 4096, "cleared block, last page");
  constexpr size_t kWritten = 256 << 10, kFrom = 1000, kTo = 200000;
  Fill(block, kWritten, 5);
  g_memset(block + kFrom, 0, kTo - kFrom);
  std::vector<uint8_t> want(kWritten);
  Fill(want.data(), kWritten, 5);
  std::fill(want.begin() + kFrom, want.begin() + kTo, 0);
  if (memcmp(block, want.data(), kWritten) != 0) {
    fprintf(stderr, "host_heap_probe: a clear of bytes [%zu, %zu) set other bytes\n", kFrom, kTo);
    g_failures.fetch_add(1);
  }
  g_memset(block + bytes - kWritten, 0xab, kWritten);
  for (size_t i = bytes - kWritten; i < bytes; ++i) {
    if (block[i] != 0xab) {
      fprintf(stderr, "host_heap_probe: memset 0xab: byte %zu is %u\n", i, block[i]);
      g_failures.fetch_add(1);
      break;
    }
  }
  free(block);
}

int Flag(int argc, char** argv, const char* name, int fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (strcmp(argv[i], name) == 0) return atoi(argv[i + 1]);
  }
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  const int blocks = Flag(argc, argv, "--blocks", 4);
  const size_t bytes = size_t(Flag(argc, argv, "--block-mib", 4)) << 20;
  const int rounds = Flag(argc, argv, "--rounds", 3);
  const int threads = Flag(argc, argv, "--threads", 2);
  if (const int clears = Flag(argc, argv, "--clears", 0); clears > 0) {
    Clears(bytes, clears);
    if (g_failures.load() != 0) return 1;
    printf("host_heap_probe: OK\n");
    return 0;
  }

  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(threads));
  for (int t = 0; t < threads; ++t) pool.emplace_back(Worker, t, blocks, bytes, rounds);
  for (auto& t : pool) t.join();
  // --rounds-only: the blocks' rounds and nothing after (a run in a tight
  // memory cgroup, where the fork child's copies would not fit).
  bool rounds_only = false;
  for (int i = 1; i < argc; ++i) rounds_only |= strcmp(argv[i], "--rounds-only") == 0;
  if (rounds_only) {
    if (g_failures.load() != 0) return 1;
    printf("host_heap_probe: OK (%d threads x %d blocks of %zu MiB, %d rounds)\n", threads, blocks,
           bytes >> 20, rounds);
    return 0;
  }

  // --hold: with blocks alive, some of them on SSD, print a line and wait
  // for one on stdin (the tools read the statistics meanwhile).
  bool hold = false;
  for (int i = 1; i < argc; ++i) hold |= strcmp(argv[i], "--hold") == 0;
  if (hold) {
    std::vector<void*> held;
    for (int b = 0; b < blocks; ++b) {
      held.push_back(malloc(bytes));
      Fill(held.back(), bytes, 900 + uint64_t(b));
    }
    printf("host_heap_probe: holding %d blocks\n", blocks);
    fflush(stdout);
    char line[16];
    if (fgets(line, sizeof line, stdin) == nullptr) {
      // end of input: go on as after a line
    }
    for (int b = 0; b < blocks; ++b) Check(held[b], bytes, 900 + uint64_t(b), "held block");
    for (void* p : held) free(p);
  }

  // calloc: zeros, though its pages were never written.
  auto* zeros = static_cast<uint64_t*>(calloc(bytes / 8, 8));
  for (size_t i = 0; zeros && i < bytes / 8; ++i) {
    if (zeros[i] != 0) {
      fprintf(stderr, "host_heap_probe: calloc: word %zu is not zero\n", i);
      g_failures.fetch_add(1);
      break;
    }
  }
  free(zeros);

  // realloc: shrink in place, then grow past the block (moved, bytes kept).
  void* block = malloc(bytes);
  Fill(block, bytes, 77);
  if (malloc_usable_size(block) < bytes) {
    fprintf(stderr, "host_heap_probe: malloc_usable_size %zu < %zu\n", malloc_usable_size(block),
            bytes);
    g_failures.fetch_add(1);
  }
  void* shrunk = realloc(block, bytes / 2);
  Check(shrunk, bytes / 2, 77, "realloc shrink");
  Fill(shrunk, bytes / 2, 78);
  void* grown = realloc(shrunk, bytes * 2);
  Check(grown, bytes / 2, 78, "realloc grow");
  free(grown);

  // fork: the child sees the parent's bytes and its writes stay its own.
  void* shared = malloc(bytes);
  Fill(shared, bytes, 99);
  // Pressure, so that some of its pages are on SSD at fork time.
  std::vector<void*> others;
  for (int b = 0; b < blocks; ++b) {
    others.push_back(malloc(bytes));
    Fill(others.back(), bytes, 500 + uint64_t(b));
  }
  const pid_t pid = fork();
  if (pid == 0) {
    bool ok = Check(shared, bytes, 99, "fork child: parent's block");
    for (int b = 0; ok && b < blocks; ++b)
      ok = Check(others[b], bytes, 500 + uint64_t(b), "fork child: other block");
    Fill(shared, bytes, 100);
    ok = ok && Check(shared, bytes, 100, "fork child: its own write");
    free(shared);
    for (void* p : others) free(p);
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(stderr, "host_heap_probe: fork child failed (status %d)\n", status);
    g_failures.fetch_add(1);
  }
  Check(shared, bytes, 99, "parent after the child wrote its copy");
  for (int b = 0; b < blocks; ++b)
    Check(others[b], bytes, 500 + uint64_t(b), "parent: other block");
  for (void* p : others) free(p);

  // Bad frees (--bad-frees, only where the blocks are tiered: the heap
  // would abort): an interior pointer, then the block twice.
  bool bad_frees = false;
  for (int i = 1; i < argc; ++i) bad_frees |= strcmp(argv[i], "--bad-frees") == 0;
  if (bad_frees) {
    void* interior = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(shared) + 4096);
    free(interior);
  }
  free(shared);
  if (bad_frees) free(shared);

  if (g_failures.load() != 0) return 1;
  printf("host_heap_probe: OK (%d threads x %d blocks of %zu MiB, %d rounds)\n", threads, blocks,
         bytes >> 20, rounds);
  return 0;
}
