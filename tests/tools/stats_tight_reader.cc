// stats_tight_reader: a reader polling one process's stats segment in a
// tight loop, for scripts/bench-reader-impact.
//
//   stats_tight_reader DIR PID [--mode copy|read|spin]
//
// Waits for DIR/kvtier.PID to appear, then until process PID exits:
//   copy  copies snapshots back to back from one mapping (SnapshotCopy, the
//         sequence-locked copy every reader makes): the most a reader can
//         press on the writer's memory;
//   read  reads it as kvtier-top does on each refresh (SegmentDir::Read:
//         open, map, copy, liveness checks);
//   spin  burns the same CPU without reading (the control: what the reader
//         costs the machine whatever it reads).
// Prints "MODE: snapshots N in S s (R per s)" on stderr at the end.
// Exit status: 0, 1 if the segment never appeared, 2 usage error.
// Thread-safety: single-threaded program.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "kvtier/stats.h"
#include "tools/stats/stats_reader.h"

namespace {

using Clock = std::chrono::steady_clock;

// Copies between liveness checks (kill(pid, 0) is a syscall; keep it rare).
constexpr uint64_t kCheckEvery = 4096;

bool Alive(pid_t pid) { return kill(pid, 0) == 0 || errno != ESRCH; }

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 && !(argc == 5 && strcmp(argv[3], "--mode") == 0)) {
    fprintf(stderr, "usage: stats_tight_reader DIR PID [--mode copy|read|spin]\n");
    return 2;
  }
  const std::string dir = argv[1];
  const pid_t pid = static_cast<pid_t>(atoi(argv[2]));
  const std::string mode = argc == 5 ? argv[4] : "copy";
  if (pid <= 0 || (mode != "copy" && mode != "read" && mode != "spin")) {
    fprintf(stderr, "stats_tight_reader: PID %s / mode %s: expected a pid and copy, read or spin\n",
            argv[2], mode.c_str());
    return 2;
  }
  const std::string path = dir + "/" + KVTIER_STATS_PREFIX + std::to_string(pid);

  // The engine creates its segment when kvtier starts in it; poll for it
  // (another process) for up to 60 s. The file exists a moment before the
  // writer sizes it, and a mapping past its end would fault (SIGBUS).
  int fd = -1;
  const auto give_up = Clock::now() + std::chrono::seconds(60);
  while (true) {
    fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) == 0 &&
        static_cast<size_t>(st.st_size) >= sizeof(kvtier_stats_segment)) {
      break;
    }
    if (fd >= 0) close(fd);
    if (!Alive(pid) || Clock::now() >= give_up) {
      fprintf(stderr, "stats_tight_reader: %s did not appear\n", path.c_str());
      return 1;
    }
    // Polls a condition under a deadline; no race depends on this pause.
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  void* map = mmap(nullptr, sizeof(kvtier_stats_segment), PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (map == MAP_FAILED) {
    fprintf(stderr, "stats_tight_reader: mmap %s: %s\n", path.c_str(), strerror(errno));
    return 1;
  }
  std::string error;
  auto segments = kvtier::stats::SegmentDir::Open(dir, &error);
  if (segments == nullptr) {
    fprintf(stderr, "stats_tight_reader: %s\n", error.c_str());
    return 1;
  }

  auto snapshot = std::make_unique<kvtier_stats_segment>();
  const auto start = Clock::now();
  uint64_t count = 0;
  volatile uint64_t sink = 0;  // keeps the spin loop from being optimised out
  for (bool alive = true; alive; alive = Alive(pid)) {
    for (uint64_t i = 0; i < kCheckEvery; ++i) {
      if (mode == "copy") {
        if (kvtier::stats::SnapshotCopy(map, snapshot.get())) sink = snapshot->seq;
      } else if (mode == "read") {
        kvtier::stats::ReadResult r = segments->Read(pid);
        if (r.state != kvtier::stats::ReadState::kOk) break;  // exiting: check liveness
        sink = r.snapshot->seq;
      } else {
        sink = sink + i;
      }
      ++count;
    }
  }
  const double s = std::chrono::duration<double>(Clock::now() - start).count();
  fprintf(stderr, "stats_tight_reader: %s: %s %llu in %.2f s (%.0f per s)\n", mode.c_str(),
          mode == "spin" ? "iterations" : "snapshots", static_cast<unsigned long long>(count), s,
          s > 0 ? double(count) / s : 0.0);
  munmap(map, sizeof(kvtier_stats_segment));
  return 0;
}
