// stats_fake_publisher: a stand-in kvtier process for tool tests and demos.
//
//   stats_fake_publisher DIR [--interval-ms N] [--command NAME] [--events N]
//
// Publishes the synthetic process (synthetic.h) in DIR, step 1, 2, 3, ...
// every N ms (default 100), prints "ready <pid>" once the first publish is
// visible, and removes its segment on SIGTERM or SIGINT.
// Thread-safety: single-threaded program.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "runtime/stats_segment.h"
#include "tests/tools/synthetic.h"

namespace {

volatile sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr,
            "usage: stats_fake_publisher DIR [--interval-ms N] [--command NAME] [--events N]\n");
    return 2;
  }
  int interval_ms = 100;
  int events = 3;
  kvtier::StatsIdentity id;
  id.command = "fake-engine";
  id.backend = "sim";
  id.policy = "lru";
  id.disk_io = "io_uring+direct";
  id.page_size = kvtier::testing::Synthetic::kPageSize;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--interval-ms") == 0) {
      interval_ms = atoi(argv[i + 1]);
    } else if (strcmp(argv[i], "--command") == 0) {
      id.command = argv[i + 1];
    } else if (strcmp(argv[i], "--events") == 0) {
      events = atoi(argv[i + 1]);
    }
  }
  struct sigaction sa = {};
  sa.sa_handler = OnSignal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);

  auto seg = kvtier::StatsSegment::Create(argv[1], id);
  if (!seg.ok()) {
    fprintf(stderr, "stats_fake_publisher: %s\n", seg.status().message().c_str());
    return 1;
  }
  kvtier::testing::SyntheticProcess process;
  for (int e = 0; e < events; ++e)
    seg.value()->AddEvent("synthetic event " + std::to_string(e + 1));
  uint64_t step = 1;
  process.Step(step);
  seg.value()->Publish(process.counters(), process.regions());
  printf("ready %d\n", static_cast<int>(getpid()));
  fflush(stdout);
  while (!g_stop) {
    std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms));  // the publishing tick
    process.Step(++step);
    seg.value()->Publish(process.counters(), process.regions());
  }
  return 0;
}
