// Summaries, tables and CSV files (see mr_report.h).
#include "tools/bench/mr_report.h"

#include <algorithm>
#include <cmath>

namespace kvtier::bench {
namespace {

// Linear interpolation between closest ranks (numpy's default).
double Percentile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const double pos = q * (sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo);
}

double Gb(uint64_t bytes) { return bytes / 1e9; }

double Mean(const std::vector<double>& values) {
  double sum = 0;
  for (double v : values) sum += v;
  return values.empty() ? 0 : sum / values.size();
}

}  // namespace

Summary Summarize(const SystemResult& r) {
  Summary s;
  std::vector<double> ttft, returning;
  double first_launch = 1e300, last_finish = 0, out_tokens = 0, prompt = 0;
  double dev = 0, host = 0, disk = 0, rec = 0;
  for (const RequestRow& row : r.rows) {
    if (row.ttft < 0) continue;
    ttft.push_back(row.ttft);
    if (row.returning) returning.push_back(row.ttft);
    first_launch = std::min(first_launch, row.launch_time);
    last_finish = std::max(last_finish, row.finish_time);
    out_tokens += row.generation_tokens;
    prompt += row.prompt_tokens;
    dev += row.hit_device;
    host += row.hit_host;
    disk += row.hit_disk;
    rec += row.recomputed;
  }
  s.requests = ttft.size();
  if (ttft.empty()) return s;
  std::sort(ttft.begin(), ttft.end());
  s.ttft_mean = Mean(ttft);
  s.ttft_p50 = Percentile(ttft, 0.50);
  s.ttft_p90 = Percentile(ttft, 0.90);
  s.ttft_p99 = Percentile(ttft, 0.99);
  s.returning = returning.size();
  std::sort(returning.begin(), returning.end());
  s.returning_mean = Mean(returning);
  s.returning_p90 = Percentile(returning, 0.90);  // 0 when there is none
  const double span = last_finish - first_launch;
  if (span > 0) {
    s.req_per_s = ttft.size() / span;
    s.out_tok_per_s = out_tokens / span;
  }
  if (prompt > 0) {
    s.hit_device = dev / prompt;
    s.hit_host = host / prompt;
    s.hit_disk = disk / prompt;
    s.recomputed = rec / prompt;
  }
  return s;
}

Ratios RatiosOf(const Summary& s, const std::vector<SystemResult>& results) {
  Ratios r;
  for (const SystemResult& b : results) {
    if (b.name != "explicit-offload-layerwise" && b.name != "oracle") continue;
    const Summary base = Summarize(b);
    if (base.requests == 0) continue;
    if (b.name == "oracle") {
      r.mean_vs_oracle = base.ttft_mean > 0 ? s.ttft_mean / base.ttft_mean : 0;
    } else {
      r.mean_vs_layerwise = base.ttft_mean > 0 ? s.ttft_mean / base.ttft_mean : 0;
      r.p90_vs_layerwise = base.ttft_p90 > 0 ? s.ttft_p90 / base.ttft_p90 : 0;
    }
  }
  return r;
}

bool TtftStat(const Summary& s, const std::string& stat, double* value) {
  if (stat == "mean")
    *value = s.ttft_mean;
  else if (stat == "p50")
    *value = s.ttft_p50;
  else if (stat == "p90")
    *value = s.ttft_p90;
  else if (stat == "p99")
    *value = s.ttft_p99;
  else
    return false;
  return true;
}

const char* HitTier(const RequestRow& row) {
  const int best = std::max({row.hit_device, row.hit_host, row.hit_disk});
  if (best == 0) return "none";
  if (best == row.hit_device) return "device";
  if (best == row.hit_host) return "host";
  return "disk";
}

void PrintSummaryTable(FILE* out, const std::vector<SystemResult>& results,
                       const std::string& ttft_stat, double ttft_target_s) {
  auto ratio = [](double v) {
    char buf[16];
    if (v <= 0) return std::string("-");
    snprintf(buf, sizeof buf, "%.2f", v);
    return std::string(buf);
  };
  fprintf(out,
          "%-26s %5s | %8s %8s %8s %8s | %5s %5s %5s | %6s %7s | %5s %5s %5s %5s | %8s %8s %8s "
          "%8s | %6s | %6s\n",
          "system", "reqs", "ttft", "p50", "p90", "p99", "mean", "p90", "mean", "req/s", "tok/s",
          "dev%", "host%", "disk%", "recmp%", "h2d-flt", "h2d-pf", "d2h", "disk-rw", "target",
          "run-s");
  fprintf(out,
          "%-26s %5s | %8s %8s %8s %8s | %5s %5s %5s | %6s %7s | %5s %5s %5s %5s | %8s %8s %8s "
          "%8s | %6s | %6s\n",
          "", "", "mean s", "s", "s", "s", "/lw", "/lw", "/orc", "", "out", "", "", "", "", "GB",
          "GB", "GB", "GB", ttft_stat.c_str(), "");
  for (const SystemResult& r : results) {
    const Summary s = Summarize(r);
    const Ratios x = RatiosOf(s, results);
    double v = 0;
    TtftStat(s, ttft_stat, &v);
    const MoveCounters& m = r.moves;
    fprintf(out,
            "%-26s %5zu | %8.3f %8.3f %8.3f %8.3f | %5s %5s %5s | %6.3f %7.1f | %5.1f %5.1f %5.1f "
            "%5.1f | %8.1f %8.1f %8.1f %8.1f | %6s | %6.1f\n",
            r.name.c_str(), s.requests, s.ttft_mean, s.ttft_p50, s.ttft_p90, s.ttft_p99,
            ratio(x.mean_vs_layerwise).c_str(), ratio(x.p90_vs_layerwise).c_str(),
            ratio(x.mean_vs_oracle).c_str(), s.req_per_s, s.out_tok_per_s, 100 * s.hit_device,
            100 * s.hit_host, 100 * s.hit_disk, 100 * s.recomputed, Gb(m.h2d_fault),
            Gb(m.h2d_prefetch + m.h2d_load), Gb(m.d2h_demote + m.d2h_evict + m.d2h_store),
            Gb(m.disk_read + m.disk_write),
            s.requests == 0      ? "-"
            : v <= ttft_target_s ? "met"
                                 : "missed",
            r.wall_s);
  }
}

void PrintEndpointTable(FILE* out, const std::vector<SystemResult>& results,
                        const std::string& baseline) {
  Summary base;
  for (const SystemResult& r : results) {
    if (r.name == baseline) base = Summarize(r);
  }
  auto over = [](double num, double den) {
    char buf[16];
    if (num <= 0 || den <= 0) return std::string("-");
    snprintf(buf, sizeof buf, "%.2f", num / den);
    return std::string(buf);
  };
  // Returning requests (the trace's: the server answered the user before),
  // then every request.
  const char* head =
      "%-14s %5s | %8s %8s | %8s %8s | %5s | %8s %8s %8s %8s | %8s %8s | %6s %7s | %7s %7s | %4s "
      "| %6s\n";
  fprintf(out, head, "system", "ret", "ret ttft", "ret p90", "mean", "p90", "reqs", "ttft", "p50",
          "p90", "p99", "mean", "p90", "req/s", "tok/s", "reused%", "recmp%", "late", "run-s");
  const std::string base_x = baseline.empty() ? "" : baseline.substr(0, 6) + "/x";
  fprintf(out, head, "", "reqs", "mean s", "s", base_x.c_str(), base_x.c_str(), "", "mean s", "s",
          "s", "s", base_x.c_str(), base_x.c_str(), "", "out", "", "", "", "");
  auto seconds = [](double v, bool known) {
    char buf[16];
    if (!known) return std::string("-");
    snprintf(buf, sizeof buf, "%.3f", v);
    return std::string(buf);
  };
  for (const SystemResult& r : results) {
    const Summary s = Summarize(r);
    const bool ret = r.knows_returning && s.returning > 0;
    fprintf(out,
            "%-14s %5s | %8s %8s | %8s %8s | %5zu | %8.3f %8.3f %8.3f %8.3f | %8s %8s | %6.3f "
            "%7.1f | %7.1f %7.1f | %4lld | %6.1f\n",
            r.name.c_str(), r.knows_returning ? std::to_string(s.returning).c_str() : "-",
            seconds(s.returning_mean, ret).c_str(), seconds(s.returning_p90, ret).c_str(),
            over(base.returning_mean, s.returning_mean).c_str(),
            over(base.returning_p90, s.returning_p90).c_str(), s.requests, s.ttft_mean, s.ttft_p50,
            s.ttft_p90, s.ttft_p99, over(base.ttft_mean, s.ttft_mean).c_str(),
            over(base.ttft_p90, s.ttft_p90).c_str(), s.req_per_s, s.out_tok_per_s,
            100 * s.hit_device, 100 * s.recomputed, static_cast<long long>(r.late_launches),
            r.wall_s);
  }
}

Status WriteSummaryCsv(const std::string& path, const std::vector<SystemResult>& results) {
  FILE* f = fopen(path.c_str(), "w");
  if (!f) return Status::Errorf("%s: cannot write the summary (check --output)", path.c_str());
  fprintf(f,
          "system,requests,ttft_mean,ttft_p50,ttft_p90,ttft_p99,req_per_s,out_tok_per_s,"
          "hit_device,hit_host,hit_disk,recomputed,h2d_fault_bytes,h2d_prefetch_bytes,"
          "h2d_load_bytes,d2h_demote_bytes,d2h_evict_bytes,d2h_store_bytes,disk_read_bytes,"
          "disk_write_bytes,faults,driver_evictions,refaults,policy_ticks,preemptions,"
          "late_launches,rejected,pool_bytes,run_seconds,ttft_mean_vs_layerwise,"
          "ttft_p90_vs_layerwise,ttft_mean_vs_oracle,returning_requests,returning_ttft_mean,"
          "returning_ttft_p90\n");
  for (const SystemResult& r : results) {
    const Summary s = Summarize(r);
    const Ratios x = RatiosOf(s, results);
    const MoveCounters& m = r.moves;
    fprintf(f,
            "%s,%zu,%.6f,%.6f,%.6f,%.6f,%.6f,%.3f,%.6f,%.6f,%.6f,%.6f,%llu,%llu,%llu,%llu,%llu,"
            "%llu,%llu,%llu,%llu,%llu,%llu,%llu,%lld,%lld,%lld,%llu,%.3f,%.4f,%.4f,%.4f,%zu,%.6f,"
            "%.6f\n",
            r.name.c_str(), s.requests, s.ttft_mean, s.ttft_p50, s.ttft_p90, s.ttft_p99,
            s.req_per_s, s.out_tok_per_s, s.hit_device, s.hit_host, s.hit_disk, s.recomputed,
            (unsigned long long)m.h2d_fault, (unsigned long long)m.h2d_prefetch,
            (unsigned long long)m.h2d_load, (unsigned long long)m.d2h_demote,
            (unsigned long long)m.d2h_evict, (unsigned long long)m.d2h_store,
            (unsigned long long)m.disk_read, (unsigned long long)m.disk_write,
            (unsigned long long)m.faults, (unsigned long long)m.driver_evictions,
            (unsigned long long)m.refaults, (unsigned long long)m.policy_ticks,
            (long long)r.preemptions, (long long)r.late_launches, (long long)r.rejected,
            (unsigned long long)r.pool_bytes, r.wall_s, x.mean_vs_layerwise, x.p90_vs_layerwise,
            x.mean_vs_oracle, s.returning, s.returning_mean, s.returning_p90);
  }
  return fclose(f) == 0 ? Status::Ok() : Status::Errorf("%s: write failed", path.c_str());
}

Status WriteRequestsCsv(const std::string& path, const SystemResult& result) {
  FILE* f = fopen(path.c_str(), "w");
  if (!f) return Status::Errorf("%s: cannot write the request log (check --output)", path.c_str());
  fprintf(f,
          "prompt_tokens,generation_tokens,ttft,generation_time,user_id,question_id,"
          "launch_time,finish_time,hit_tier,hit_device_tokens,hit_host_tokens,"
          "hit_disk_tokens,recomputed_tokens,returning\n");
  for (const RequestRow& r : result.rows) {
    fprintf(f, "%d,%d,%.6f,%.6f,%d,%d,%.3f,%.6f,%s,%d,%d,%d,%d,%d\n", r.prompt_tokens,
            r.generation_tokens, r.ttft, r.generation_time, r.user_id, r.question_id, r.launch_time,
            r.finish_time, HitTier(r), r.hit_device, r.hit_host, r.hit_disk, r.recomputed,
            r.returning ? 1 : 0);
  }
  return fclose(f) == 0 ? Status::Ok() : Status::Errorf("%s: write failed", path.c_str());
}

std::string FileSafe(const std::string& name) {
  std::string out = name;
  for (char& c : out) {
    if (c == ':' || c == '+' || c == '/' || c == ' ') c = '_';
  }
  return out;
}

}  // namespace kvtier::bench
