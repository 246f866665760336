// alloc_storm: many threads allocating, using and freeing device memory
// through every allocation API kvtier hooks, optionally while the main thread
// forks children that use CUDA themselves.
//   alloc_storm [--threads N] [--iterations N] [--forks N]
// Run under LD_PRELOAD=libkvtier.so KVTIER_BACKEND=sim with a KVTIER_MATCH
// that tiers the large allocations (the ctests set it up; the ASan build runs
// it too). Each iteration allocates with one of cudaMalloc, cudaMallocAsync,
// cudaMallocManaged or cuMemAlloc_v2 (small: plain; large: a tiered region),
// writes a pattern with cudaMemcpy, reads it back, and frees it with an API of
// another family now and then (cudaFree of a cuMemAlloc_v2 pointer, ...).
// A fork child allocates, copies and frees, then exits with 0 when all of it
// worked. At the end the device's free memory must be what it was at the
// start. Prints "alloc_storm: OK ..." and exits 0, or names the first failure
// and exits 1.
// Under AddressSanitizer the workers pause while the main thread forks, and
// no thread starts or ends while it does: GCC 12's sanitizer runtime does not
// lock its allocator around fork(), so a child forked while another thread is
// inside malloc (the sanitizer's own thread start-up and exit included)
// inherits a held allocator lock and hangs at its first malloc (seen here, in
// the sanitizer's SizeClassAllocator64). The other builds fork amid the storm.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <latch>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#undef cuMemAlloc
#undef cuMemFree

namespace {

constexpr size_t kSmall = 64 << 10;
constexpr size_t kLarge = 16 << 20;  // tiered with KVTIER_MATCH=size>=16M

using DriverAlloc = CUresult (*)(CUdeviceptr*, size_t);
using DriverFree = CUresult (*)(CUdeviceptr);
DriverAlloc g_cu_alloc = nullptr;
DriverFree g_cu_free = nullptr;

std::atomic<int> g_failures{0};
std::atomic<bool> g_stop{false};

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kGateForks = true;
#else
constexpr bool kGateForks = false;
#endif
std::shared_mutex g_fork_gate;    // workers shared, fork exclusive (kGateForks only)
std::latch* g_started = nullptr;  // every worker is running
std::latch g_forks_done{1};       // the main thread forks no more

void Fail(const std::string& what) {
  if (g_failures.fetch_add(1) == 0) fprintf(stderr, "alloc_storm: FAILED: %s\n", what.c_str());
}

// One allocate / fill / verify / free round with API `api` (0..3).
bool Round(unsigned api, size_t bytes, unsigned seed) {
  void* p = nullptr;
  int err = 0;
  switch (api % 4) {
    case 0:
      err = cudaMalloc(&p, bytes);
      break;
    case 1:
      err = cudaMallocAsync(&p, bytes, nullptr);
      break;
    case 2:
      err = cudaMallocManaged(&p, bytes, cudaMemAttachGlobal);
      break;
    case 3: {
      CUdeviceptr d = 0;
      err = g_cu_alloc(&d, bytes);
      p = reinterpret_cast<void*>(static_cast<uintptr_t>(d));
      break;
    }
  }
  if (err != 0 || p == nullptr) {
    Fail("allocation with API " + std::to_string(api % 4) + " of " + std::to_string(bytes) +
         " bytes: " + std::to_string(err));
    return false;
  }
  std::vector<unsigned char> host(4096), back(4096);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<unsigned char>(seed + i * 31);
  const size_t offset = bytes - host.size();  // the end: the last page of a region
  bool ok = cudaMemcpy(static_cast<char*>(p) + offset, host.data(), host.size(),
                       cudaMemcpyHostToDevice) == cudaSuccess &&
            cudaMemcpy(back.data(), static_cast<char*>(p) + offset, back.size(),
                       cudaMemcpyDeviceToHost) == cudaSuccess &&
            memcmp(host.data(), back.data(), host.size()) == 0;
  if (!ok) Fail("copy round trip of " + std::to_string(bytes) + " bytes");
  // Free with the allocating family, or now and then with another one.
  switch ((api + seed / 7) % 3) {
    case 0:
      err = cudaFree(p);
      break;
    case 1:
      err = cudaFreeAsync(p, nullptr);
      break;
    case 2:
      err = g_cu_free(static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(p)));
      break;
  }
  if (err != 0) {
    Fail("free: " + std::to_string(err));
    return false;
  }
  return ok;
}

void Worker(int id, int iterations) {
  g_started->count_down();
  unsigned seed = static_cast<unsigned>(id) * 7919u + 1;
  for (int i = 0; i < iterations && !g_stop.load(); ++i) {
    seed = seed * 1103515245u + 12345u;
    const size_t bytes = (seed >> 8) % 5 == 0 ? kLarge : kSmall + (seed % 16) * 4096;
    std::shared_lock<std::shared_mutex> gate(g_fork_gate, std::defer_lock);
    if (kGateForks) gate.lock();
    if (!Round(seed >> 4, bytes, seed)) break;
  }
  if (kGateForks) g_forks_done.wait();  // no thread exit while the main thread forks
}

// Forks, lets the child use CUDA, and waits for it with a deadline.
bool ForkChild(int n) {
  std::unique_lock<std::shared_mutex> gate(g_fork_gate, std::defer_lock);
  if (kGateForks) gate.lock();
  pid_t pid = fork();
  if (pid < 0) return false;
  if (pid == 0) {
    bool ok = Round(0, kSmall, 11) && Round(3, kLarge, 12) && Round(1, kLarge, 13);
    _exit(ok ? 0 : 1);
  }
  if (gate.owns_lock()) gate.unlock();
  timespec start;
  clock_gettime(CLOCK_MONOTONIC, &start);
  for (;;) {
    int status = 0;
    pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) {
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        Fail("fork child " + std::to_string(n) + " exited with status " + std::to_string(status));
        return false;
      }
      return true;
    }
    timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (now.tv_sec - start.tv_sec > 20) {  // a child that deadlocked never ends
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      Fail("fork child " + std::to_string(n) + " hung (killed after 20 s)");
      return false;
    }
    poll(nullptr, 0, 5);  // waiting for another process: poll with a deadline
  }
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 4, iterations = 300, forks = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    int v = atoi(argv[i + 1]);
    if (flag == "--threads")
      threads = v;
    else if (flag == "--iterations")
      iterations = v;
    else if (flag == "--forks")
      forks = v;
  }
  // The driver API as kvtier serves it (no driver is linked in).
  g_cu_alloc = reinterpret_cast<DriverAlloc>(dlsym(RTLD_DEFAULT, "cuMemAlloc_v2"));
  g_cu_free = reinterpret_cast<DriverFree>(dlsym(RTLD_DEFAULT, "cuMemFree_v2"));
  if (g_cu_alloc == nullptr || g_cu_free == nullptr) {
    fprintf(stderr, "alloc_storm: run it under LD_PRELOAD=libkvtier.so KVTIER_BACKEND=sim\n");
    return 1;
  }
  size_t free0 = 0, total = 0, free1 = 0;
  if (cudaMemGetInfo(&free0, &total) != cudaSuccess) return 1;

  std::latch started(threads);
  g_started = &started;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(Worker, t, iterations);
  if (kGateForks) started.wait();  // thread start-up allocates in the sanitizer
  for (int f = 0; f < forks && g_failures.load() == 0; ++f) ForkChild(f);
  g_forks_done.count_down();
  for (std::thread& t : pool) t.join();

  if (cudaMemGetInfo(&free1, &total) != cudaSuccess || free1 != free0) {
    Fail("free device memory " + std::to_string(free1) + " after the storm, " +
         std::to_string(free0) + " before (a leak)");
  }
  if (g_failures.load() != 0) return 1;
  printf("alloc_storm: OK (%d threads x %d rounds, %d fork children)\n", threads, iterations,
         forks);
  return 0;
}
