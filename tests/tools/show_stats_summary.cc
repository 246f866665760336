// Parser of the KVTIER_SHOW_STATS summary (see show_stats_summary.h). Plain
// string scanning, line by line: each figure sits after a fixed label.
#include "tests/tools/show_stats_summary.h"

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <vector>

namespace kvtier::testing {
namespace {

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// The rest of the first line that starts with `label` after leading spaces,
// or null.
const char* After(const std::vector<std::string>& lines, const char* label) {
  for (const std::string& line : lines) {
    const size_t start = line.find_first_not_of(' ');
    if (start != std::string::npos && line.compare(start, strlen(label), label) == 0) {
      return line.c_str() + start + strlen(label);
    }
  }
  return nullptr;
}

// The text between `from` and the next `until` in `s`; false if either is
// missing.
bool Between(const std::string& s, const char* from, const char* until, std::string* out) {
  const size_t a = s.find(from);
  if (a == std::string::npos) return false;
  const size_t b = s.find(until, a + strlen(from));
  if (b == std::string::npos) return false;
  *out = s.substr(a + strlen(from), b - a - strlen(from));
  return true;
}

bool Fail(const char* what, std::string* error) {
  *error = std::string("summary line \"") + what + "\" missing or malformed";
  return false;
}

}  // namespace

bool ParseShowStatsSummary(const std::string& text, ShowStatsSummary* out, std::string* error) {
  const std::vector<std::string> lines = Lines(text);
  char backend[32] = {}, policy[32] = {};
  const char* p = After(lines, "kvtier summary (pid ");
  if (p == nullptr ||
      sscanf(p, "%d, backend %31[^,], policy %31[^,],", &out->pid, backend, policy) != 3) {
    return Fail("kvtier summary", error);
  }
  out->backend = backend;
  out->policy = policy;

  p = After(lines, "tiered regions ");
  const char* matched = p ? strstr(p, "; ") : nullptr;
  if (matched == nullptr || sscanf(matched, "; %" SCNu64 " of %" SCNu64 " allocations matched",
                                   &out->matched_allocations, &out->allocations) != 2) {
    return Fail("tiered regions", error);
  }

  p = After(lines, "device residency ");
  const std::string residency = p ? p : "";
  if (!Between(residency, "peak ", " of ", &out->device_peak) ||
      !Between(residency, " of ", " budget (", &out->device_budget)) {
    return Fail("device residency", error);
  }
  const bool below = residency.find("never above budget") != std::string::npos;
  if (!below && residency.find("ABOVE BUDGET") == std::string::npos) {
    return Fail("device residency", error);
  }
  out->never_above_budget = below;

  struct Count {
    const char* label;
    uint64_t* value;
  };
  for (const Count& c :
       {Count{"demoted ", &out->demoted_pages}, Count{"promoted ", &out->promoted_pages},
        Count{"faults ", &out->faults}, Count{"driver evictions ", &out->driver_evictions}}) {
    p = After(lines, c.label);
    if (p == nullptr || sscanf(p, "%" SCNu64, c.value) != 1) return Fail(c.label, error);
  }
  p = After(lines, "faults ");
  const char* refaults = strstr(p, "refaults ");
  if (refaults == nullptr || sscanf(refaults, "refaults %" SCNu64, &out->refaults) != 1) {
    return Fail("faults (refaults)", error);
  }
  return true;
}

bool PrintedBytesEqual(const std::string& printed, uint64_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  char* end = nullptr;
  const double shown = strtod(printed.c_str(), &end);
  if (end == printed.c_str() || *end != ' ') return false;
  for (int u = 0; u < 7; ++u) {
    if (strcmp(end + 1, kUnits[u]) != 0) continue;
    const double actual = std::ldexp(static_cast<double>(bytes), -10 * u);
    return std::llround(shown * 100) == std::llround(actual * 100);
  }
  return false;
}

}  // namespace kvtier::testing
