// Results of kvtier-bench multiround: summaries, tables and CSV files.
//
// The per-request CSV has LMBenchmark's columns (prompt_tokens,
// generation_tokens, ttft, generation_time, user_id, question_id,
// launch_time, finish_time) followed by where each prompt's KV came from:
// hit_tier (the tier most of the hit came from, or none), hit_device_tokens,
// hit_host_tokens, hit_disk_tokens and recomputed_tokens.
// Thread-safety: functions of their arguments.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "runtime/status.h"
#include "tools/bench/systems.h"

namespace kvtier::bench {

struct Summary {
  size_t requests = 0;
  double ttft_mean = 0, ttft_p50 = 0, ttft_p90 = 0, ttft_p99 = 0;
  double req_per_s = 0, out_tok_per_s = 0;
  // Shares of all prompt tokens: where their KV came from.
  double hit_device = 0, hit_host = 0, hit_disk = 0, recomputed = 0;
  // The returning requests alone (RequestRow::returning).
  size_t returning = 0;
  double returning_mean = 0, returning_p90 = 0;
};

Summary Summarize(const SystemResult& r);

// Each system's mean and p90 TTFT over explicit-offload-layerwise's (the
// strongest explicit baseline) and its mean over the oracle's (the limit);
// 0 where that system was not run.
struct Ratios {
  double mean_vs_layerwise = 0, p90_vs_layerwise = 0, mean_vs_oracle = 0;
};
Ratios RatiosOf(const Summary& s, const std::vector<SystemResult>& results);
// "mean", "p50", "p90" or "p99" of the TTFT; false for another name.
bool TtftStat(const Summary& s, const std::string& stat, double* value);
const char* HitTier(const RequestRow& row);

// The per-system table: TTFT, its ratios (RatiosOf), throughput, hits by
// tier, bytes moved, run time.
void PrintSummaryTable(FILE* out, const std::vector<SystemResult>& results,
                       const std::string& ttft_stat, double ttft_target_s);
// The table of runs against a server (--endpoint): the returning requests'
// count, mean and p90 TTFT (RequestRow::returning; "-" for a run read back
// without them), then every request's TTFT, throughput, the share of prompt
// tokens the server reused and recomputed, late launches; with a `baseline`
// run's name, each run's mean and p90 TTFT over the baseline's, returning
// and all ("base/x": the baseline's figure over this run's).
void PrintEndpointTable(FILE* out, const std::vector<SystemResult>& results,
                        const std::string& baseline = "");
Status WriteSummaryCsv(const std::string& path, const std::vector<SystemResult>& results);
Status WriteRequestsCsv(const std::string& path, const SystemResult& result);
// "kvtier:hints+s3fifo" -> "kvtier_hints_s3fifo"
std::string FileSafe(const std::string& name);

}  // namespace kvtier::bench
