// Log: fixed-buffer stderr logging (see log.h).
#include "runtime/log.h"

#include <unistd.h>

#include <cstdarg>
#include <cstdio>

namespace kvtier {

std::atomic<int> g_log_level{0};

namespace {

thread_local bool t_in_log = false;

void VLog(const char* fmt, va_list ap) {
  if (t_in_log) return;
  t_in_log = true;
  char buf[1024];
  int n = snprintf(buf, sizeof buf, "kvtier: ");
  int m = vsnprintf(buf + n, sizeof buf - n - 1, fmt, ap);
  if (m < 0) m = 0;
  size_t len = static_cast<size_t>(n) + static_cast<size_t>(m);
  if (len > sizeof buf - 2) len = sizeof buf - 2;
  buf[len++] = '\n';
  for (size_t off = 0; off < len;) {
    ssize_t w = write(STDERR_FILENO, buf + off, len - off);
    if (w <= 0) break;
    off += static_cast<size_t>(w);
  }
  t_in_log = false;
}

}  // namespace

void Log(int level, const char* fmt, ...) {
  if (level > g_log_level.load(std::memory_order_relaxed)) return;
  va_list ap;
  va_start(ap, fmt);
  VLog(fmt, ap);
  va_end(ap);
}

void WarnOnce(std::atomic<bool>* flag, const char* fmt, ...) {
  if (flag->exchange(true, std::memory_order_relaxed)) return;
  va_list ap;
  va_start(ap, fmt);
  VLog(fmt, ap);
  va_end(ap);
}

}  // namespace kvtier
