// Process checks for the stats tools: is the process that wrote a segment
// still alive, and is it still the same process (pids are reused)?
// Thread-safety: stateless functions, safe from any thread.
#pragma once

#include <cstdint>

namespace kvtier::stats {

enum class Liveness {
  kAlive,   // the process exists (possibly as another user: EPERM)
  kDead,    // no such process
  kReused,  // a process with that pid exists but started after the writer
};

// kill(pid, 0) == 0 || errno == EPERM.
bool PidExists(int32_t pid);
// Field 22 of /proc/<pid>/stat (start time, clock ticks after boot); 0 when
// unknown (no procfs, or the process just vanished).
uint64_t ProcessStartTicks(int32_t pid);
// Whether `pid` is still the process that wrote a segment recording
// `start_ticks` (0: unknown, only the pid is checked).
Liveness CheckProcess(int32_t pid, uint64_t start_ticks);

}  // namespace kvtier::stats
