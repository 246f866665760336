// ProcStartTicks: field 22 of a /proc/<pid>/stat file, the process's start
// time in clock ticks after boot. With the pid it names one process across
// pid reuse. Header-only: the runtime stamps its stats segment with it, and
// the tools, which never link the runtime, check it.
// Thread-safety: pure function (reads procfs).
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace kvtier {

// 0 when the file cannot be read or parsed (no procfs, another pid
// namespace, hidepid).
inline uint64_t ProcStartTicks(const char* stat_path) {
  int fd = open(stat_path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[1024];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  // The command (field 2) may hold spaces and ')': fields resume after the
  // last ')'. Field 3 follows it; starttime is field 22.
  const char* p = strrchr(buf, ')');
  if (p == nullptr) return 0;
  for (int field = 3; field <= 22; ++field) {  // the space before each field
    p = strchr(p + 1, ' ');
    if (p == nullptr) return 0;
  }
  return strtoull(p + 1, nullptr, 10);
}

}  // namespace kvtier
