// The statistic fields of a segment as data: name, kind, doc and a getter,
// generated from include/kvtier/stats_fields.def, for renderers that list
// every field (JSON, Prometheus exposition, the text snapshot).
// Thread-safety: the table is immutable after first use.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvtier/stats.h"

namespace kvtier::stats {

enum class FieldKind { kCounter, kGauge };

struct FieldInfo {
  const char* name;  // "demoted_bytes"
  FieldKind kind;
  const char* doc;
  uint64_t (*get)(const kvtier_stats_segment&);
};

const std::vector<FieldInfo>& Fields();

// A fixed-size char field of the segment as a string (stops at the first NUL
// or at the end of the field if the writer left none).
template <size_t N>
std::string FieldString(const char (&field)[N]) {
  size_t n = 0;
  while (n < N && field[n] != '\0') ++n;
  return std::string(field, n);
}

// `bytes` with every invalid UTF-8 sequence replaced by U+FFFD, for formats
// that require UTF-8 (JSON, Prometheus label values). The writer copies
// program names and tags as bytes, so they may be cut mid-character.
std::string ValidUtf8(const std::string& bytes);

// What kind of backend a process runs: the GPU ones (the CUDA backend,
// the simulated GPU) tier device, host and disk; the host backend tiers a
// CPU engine's resident memory, its staging and SSD. Parsed once from the
// segment's `backend` words; tools decide on this, never on the words.
enum class Backend { kCuda, kSim, kHost, kOther };
Backend BackendOf(const kvtier_stats_segment& s);

// Derived figures every tool shows the same way.
inline uint64_t ErrorCount(const kvtier_stats_segment& s) {
  return s.spill_errors + s.restore_errors + s.checksum_mismatches + s.bad_frees;
}

}  // namespace kvtier::stats
