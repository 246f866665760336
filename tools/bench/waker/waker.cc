// libkvtier-bench-waker.so: preloaded into the benchmarks' baseline engines
// (scripts/bench-llama-host, scripts/bench-engine), it starts one thread that
// sleeps BENCH_WAKER_MS milliseconds at a time (default 10, as kvtier's policy
// thread ticks, KVTIER_TICK_MS), for the life of the process; 0 starts none.
//
// Why: on the team's build machines, virtual machines under a hypervisor
// that shadows page tables and packs threads onto fewer virtual CPUs, an
// engine with such a thread decodes faster: llama.cpp decoded a token in
// 6.6-7.4 ms with it against 10.7-14.7 ms without, all its KV in memory
// (docs/bench-llama-host.md#a-thread-that-wakes-every-10-ms). kvtier's policy
// thread is one, so without this the baselines would pay for the machine's
// idle virtual CPUs and kvtier would not. The thread does nothing else.
#include <pthread.h>
#include <time.h>

#include <cerrno>
#include <cstdlib>

namespace {

void* Wake(void* arg) {
  const long ms = reinterpret_cast<long>(arg);
  const timespec period{ms / 1000, (ms % 1000) * 1000000};
  for (;;) nanosleep(&period, nullptr);
  return nullptr;
}

__attribute__((constructor)) void StartWaker() {
  const char* text = getenv("BENCH_WAKER_MS");
  long ms = 10;
  if (text != nullptr) {
    char* end = nullptr;
    errno = 0;
    ms = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || ms < 0 || ms > 10000) ms = 10;
  }
  if (ms == 0) return;
  pthread_t thread;
  if (pthread_create(&thread, nullptr, Wake, reinterpret_cast<void*>(ms)) == 0) {
    pthread_setname_np(thread, "bench-waker");
    pthread_detach(thread);
  }
}

}  // namespace
