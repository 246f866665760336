// Parses the summary a kvtier process prints to stderr at exit with
// KVTIER_SHOW_STATS=1 (Runtime::SummaryText), so a test can hold the figures
// the engine reported against what the tools read from its segment.
// Thread-safety: value types and pure functions.
#pragma once

#include <cstdint>
#include <string>

namespace kvtier::testing {

struct ShowStatsSummary {
  int pid = 0;
  std::string backend;
  std::string policy;
  uint64_t matched_allocations = 0;
  uint64_t allocations = 0;
  std::string device_peak;    // as printed, e.g. "64 MiB"
  std::string device_budget;  // as printed
  bool never_above_budget = false;
  uint64_t demoted_pages = 0;
  uint64_t promoted_pages = 0;
  uint64_t faults = 0;
  uint64_t refaults = 0;
  uint64_t driver_evictions = 0;
};

// Finds the summary in `text` (a process's whole stderr). False, with
// *error naming the line that is missing or malformed, if it is not there.
bool ParseShowStatsSummary(const std::string& text, ShowStatsSummary* out, std::string* error);

// True if `printed` ("870.81 MiB", "64 MiB", "512 B") is `bytes` as the
// summary prints it: in that unit, rounded to two decimals.
bool PrintedBytesEqual(const std::string& printed, uint64_t bytes);

}  // namespace kvtier::testing
