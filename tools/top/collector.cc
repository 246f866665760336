// Collector: segments -> Model (see collector.h).
#include "tools/top/collector.h"

#include <time.h>

#include "tools/stats/stats_fields.h"

namespace kvtier::top {
namespace {

uint64_t RealtimeNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return uint64_t(ts.tv_sec) * 1000000000u + uint64_t(ts.tv_nsec);
}

// Counters only rise; a smaller value means a different process instance,
// which ComputeRates already rules out, so clamp rather than wrap.
double Delta(uint64_t before, uint64_t after) {
  return after >= before ? static_cast<double>(after - before) : 0.0;
}

void AddRates(Rates* sum, const Rates& r) {
  sum->promote_bps += r.promote_bps;
  sum->demote_bps += r.demote_bps;
  sum->spill_bps += r.spill_bps;
  sum->restore_bps += r.restore_bps;
  sum->fault_bps += r.fault_bps;
  sum->faults_per_s += r.faults_per_s;
  if (r.interval_s > sum->interval_s) sum->interval_s = r.interval_s;
}

}  // namespace

std::optional<Rates> ComputeRates(const kvtier_stats_segment& before,
                                  const kvtier_stats_segment& after) {
  if (before.pid != after.pid || before.start_time_ns != after.start_time_ns ||
      before.start_ticks != after.start_ticks || after.update_time_ns < before.update_time_ns) {
    return std::nullopt;
  }
  Rates r;
  if (after.update_time_ns == before.update_time_ns) return r;  // nothing published: all zero
  r.interval_s = static_cast<double>(after.update_time_ns - before.update_time_ns) / 1e9;
  r.promote_bps = Delta(before.promoted_bytes, after.promoted_bytes) / r.interval_s;
  r.demote_bps = Delta(before.demoted_bytes, after.demoted_bytes) / r.interval_s;
  r.spill_bps = Delta(before.spilled_bytes, after.spilled_bytes) / r.interval_s;
  r.restore_bps = Delta(before.restored_bytes, after.restored_bytes) / r.interval_s;
  r.fault_bps = Delta(before.fault_bytes, after.fault_bytes) / r.interval_s;
  r.faults_per_s = Delta(before.faults, after.faults) / r.interval_s;
  return r;
}

Collector::Collector(const stats::SegmentDir& dir, int32_t only_pid)
    : dir_(dir), only_pid_(only_pid) {}

Model Collector::Collect() {
  Model model;
  model.dir = dir_.path();
  std::map<int32_t, std::shared_ptr<const kvtier_stats_segment>> current;
  for (stats::ReadResult& r : dir_.ReadAll(only_pid_)) {
    switch (r.state) {
      case stats::ReadState::kOk: {
        Process p;
        p.seg = r.snapshot;
        auto prev = previous_.find(r.pid);
        if (prev != previous_.end()) p.rates = ComputeRates(*prev->second, *p.seg);
        current[r.pid] = r.snapshot;
        model.processes.push_back(std::move(p));
        break;
      }
      case stats::ReadState::kGone:
      case stats::ReadState::kNotReady:
        break;  // a process starting or exiting: nothing to say
      case stats::ReadState::kStaleRemoved:
        model.removed.push_back({r.pid, r.state, std::move(r.message)});
        break;
      default:
        model.problems.push_back({r.pid, r.state, std::move(r.message)});
        break;
    }
  }
  previous_ = std::move(current);
  model.time_ns = RealtimeNs();

  Totals& t = model.totals;
  for (const Process& p : model.processes) {
    const kvtier_stats_segment& s = *p.seg;
    t.device_used += s.device_used_bytes;
    t.device_budget += s.device_budget_bytes;
    const bool host = stats::BackendOf(s) == stats::Backend::kHost;
    // A host-backend process's one "GPU" is its mapped share: not a GPU's.
    for (uint32_t i = 0; !host && i < s.gpu_count && i < KVTIER_STATS_MAX_GPUS; ++i) {
      GpuTotal& gpu = t.gpus[s.gpus[i].ordinal];
      gpu.used += s.gpus[i].used_bytes;
      gpu.budget += s.gpus[i].budget_bytes;
    }
    t.host_used += s.host_used_bytes;
    t.host_budget += s.host_budget_bytes;
    t.disk_used += s.disk_used_bytes;
    t.disk_budget += s.disk_budget_bytes;
    if (host) {
      ++t.host_processes;
      t.mapped_used += s.device_used_bytes;
      t.mapped_budget += s.device_budget_bytes;
      t.staging_used += s.host_used_bytes;
      t.staging_budget += s.host_budget_bytes;
    }
    t.errors += stats::ErrorCount(s);
    if (p.rates) {
      AddRates(&t.rates, *p.rates);
      t.has_rates = true;
    }
  }
  return model;
}

}  // namespace kvtier::top
