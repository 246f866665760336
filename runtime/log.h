// Log: kvtier's messages on stderr, safe inside a preloaded library.
//
// Formats into a fixed stack buffer and writes it with one write(2): no
// allocation, no stdio locks, so it works before the loader is done, in fork
// children and inside hooks. A thread-local guard drops messages logged while
// logging. Warn-once sites use a static flag. Thread-safety: any thread.
#pragma once

#include <atomic>

namespace kvtier {

// Verbosity: 0 errors and warnings only; 1 configuration and lifecycle;
// 2 every allocation; 3 every move. Set from KVTIER_VERBOSE at start.
extern std::atomic<int> g_log_level;

// Writes "kvtier: <message>\n" to stderr when level <= g_log_level.
[[gnu::format(printf, 2, 3)]] void Log(int level, const char* fmt, ...);
// Level-0 message printed once per `flag` (a static std::atomic<bool> at the call site).
[[gnu::format(printf, 2, 3)]] void WarnOnce(std::atomic<bool>* flag, const char* fmt, ...);

}  // namespace kvtier
