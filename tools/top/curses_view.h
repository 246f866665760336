// The interactive kvtier-top screen (ncurses): a process list and a detail
// view, painted from the Layout lines. The input timeout is the refresh
// tick: a key redraws at once, a timeout collects a new sample.
// Thread-safety: runs on the main thread only (curses is not thread-safe).
#pragma once

#include <cstdint>
#include <string>

#include "tools/top/collector.h"

namespace kvtier::top {

struct CursesOptions {
  double delay_s = 1.0;
  int iterations = 0;      // 0: until 'q'
  int32_t detail_pid = 0;  // > 0: open this process's detail view first
};

// Returns the process exit code; on a terminal problem returns 1 with
// *error set (nothing was drawn).
int RunCurses(Collector& collector, const CursesOptions& options, std::string* error);

}  // namespace kvtier::top
