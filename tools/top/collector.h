// Collector: turns the stats segments of a directory into kvtier-top's Model
// (one consistent snapshot per process, rates from counter deltas between
// two samples, machine totals, and the segments it refused and why). The
// views (curses, text, JSON) only render a Model; they never read segments.
// Thread-safety: a Collector is used by one thread; a Model is a value.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvtier/stats.h"
#include "tools/stats/stats_reader.h"

namespace kvtier::top {

// Per-second rates between two publishes of one process.
struct Rates {
  double interval_s = 0;   // time between the two publishes compared
  double promote_bps = 0;  // bytes per second
  double demote_bps = 0;
  double spill_bps = 0;
  double restore_bps = 0;
  double fault_bps = 0;
  double faults_per_s = 0;
};

struct Process {
  std::shared_ptr<const kvtier_stats_segment> seg;
  std::optional<Rates> rates;  // none on the first sample of a process
};

// A segment that is there but could not be shown (refused layout, busy
// writer, permissions), or a stale one that was removed.
struct Problem {
  int32_t pid = 0;
  stats::ReadState state = stats::ReadState::kError;
  std::string message;
};

struct GpuTotal {
  uint64_t used = 0, budget = 0;
};

struct Totals {
  // Over every process (the JSON's totals); of them, the host backend's
  // processes' mapped and staging shares (the header shows those apart).
  uint64_t device_used = 0, device_budget = 0;
  std::map<int32_t, GpuTotal> gpus;  // by ordinal, over every process
  uint64_t host_used = 0, host_budget = 0;
  uint64_t disk_used = 0, disk_budget = 0;
  uint64_t mapped_used = 0, mapped_budget = 0;    // the host backend's device share (mapped)
  uint64_t staging_used = 0, staging_budget = 0;  // and its host share
  size_t host_processes = 0;                      // processes of the host backend
  uint64_t errors = 0;
  Rates rates;  // sums over the processes that have rates
  bool has_rates = false;
};

struct Model {
  std::string dir;
  uint64_t time_ns = 0;            // CLOCK_REALTIME of the sample
  std::vector<Process> processes;  // ascending pid
  std::vector<Problem> problems;   // refused, busy or unreadable segments
  std::vector<Problem> removed;    // stale segments removed by this sample
  Totals totals;
};

// Rates between two snapshots; nullopt when they are not two publishes of
// the same process instance in time order.
std::optional<Rates> ComputeRates(const kvtier_stats_segment& before,
                                  const kvtier_stats_segment& after);

class Collector {
 public:
  // only_pid > 0 restricts the model to that process.
  Collector(const stats::SegmentDir& dir, int32_t only_pid);
  // Reads every segment; rates are against the previous Collect.
  Model Collect();

 private:
  const stats::SegmentDir& dir_;
  const int32_t only_pid_;
  std::map<int32_t, std::shared_ptr<const kvtier_stats_segment>> previous_;
};

}  // namespace kvtier::top
