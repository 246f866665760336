// kvtier-bench multiround: LMBenchmark's synthetic multi-round QA on the
// model-only simulated GPU, every compared system on the same trace.
//
// Options use LMBenchmark's names for the workload; the rest choose the
// hardware profile, the model shape, the systems and kvtier's settings.
// Output (in --output): summary.txt and summary.csv (one row per system),
// requests-<system>.csv (one row per measured request), ttft_cdf.svg and
// occupancy.svg; with --sweep-users, sweep.txt (the most users each system
// holds at the TTFT target). Thread-safety: main thread only.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tools/bench/bench_args.h"
#include "tools/bench/hw_profile.h"
#include "tools/bench/mr_report.h"
#include "tools/bench/svg_plot.h"
#include "tools/bench/systems.h"

namespace kvtier::bench {
namespace {

const char kUsage[] =
    "usage: kvtier-bench multiround [options]\n"
    "LMBenchmark synthetic multi-round QA on the simulated GPU; every system on one trace.\n"
    "workload (LMBenchmark names):\n"
    "  --num-users N (15)  --shared-system-prompt T (1000)  --user-history-prompt T (20000)\n"
    "  --answer-len T (100)  --num-rounds N (20)  --qps Q (0.1)  --time S (100, measured window)\n"
    "  --init-user-id N (0)  --enforce-strict-concurrent-users\n"
    "  --warmup S (one per-user gap, num-users/qps; unmeasured start of the same trace)\n"
    "  --question-len T (20)  --think-time fixed|exp (fixed: every gap num-users/qps; exp:\n"
    "  exponential gaps of that mean, irregular returns)  --seed N (1: the exp draws)\n"
    "hardware and model:\n"
    "  --profile NAME|PATH (h200-pcie5)  --profile-dir DIR (tools/profiles)\n"
    "  --model llama-3.1-8b|llama-3.1-70b|qwen2.5-7b (llama-3.1-8b)  --tp N (1)\n"
    "  --block-size T (16)  --max-num-seqs N (256)  --max-num-batched-tokens T (8192)\n"
    "  --admission device|pool (device: paged systems run only what fits in HBM at once)\n"
    "systems:\n"
    "  --systems LIST (all: hbm-only,uvm-default,explicit-offload,explicit-offload-layerwise,\n"
    "                  kvtier:lru,kvtier:lfu-aging,kvtier:s3fifo,kvtier:cost-aware,\n"
    "                  kvtier:predictive,kvtier:predictive-off,kvtier:hints,oracle)\n"
    "  --hints-policy NAME (predictive: the base policy of kvtier:hints; or kvtier:hints+NAME)\n"
    "kvtier settings (runtime defaults):\n"
    "  --page-size SIZE (64K)  --tick-ms N (10)  --link-share PCT (100: of the profile's link,\n"
    "  each way, per tick)  --move-bytes-per-tick SIZE (0: no cap beyond the link)\n"
    "  --high-watermark PCT (90)  --low-watermark PCT (75)\n"
    "  --oversubscribe F (1: the engine's pool adds F x the host (+ disk) budget)\n"
    "  --host-budget SIZE (half the profile's host memory)  --disk-budget SIZE (0: no disk tier)\n"
    "output:\n"
    "  --output DIR (multiround-out)  --ttft-target S (2)  --ttft-stat mean|p50|p90|p99 (p90)\n"
    "  --sweep-users N,N,... (also run each user count; report the most users each system\n"
    "                         holds at the TTFT target)\n";

Result<double> ParseNumber(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  double d = strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !std::isfinite(d) || d < 0) {
    return Status::Errorf("%s %s: not a non-negative number", flag.c_str(), v.c_str());
  }
  return d;
}

// 2M, 256MiB, 64G, 1.5T (binary units) or a plain byte count.
Result<double> ParseSize(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  double d = strtod(v.c_str(), &end);
  std::string unit(end);
  if (!unit.empty() && (unit.back() == 'B' || unit.back() == 'b')) unit.pop_back();
  if (unit.size() == 2 && unit[1] == 'i') unit.pop_back();
  double mult = 1;
  if (unit == "K" || unit == "k")
    mult = 1024.0;
  else if (unit == "M" || unit == "m")
    mult = 1024.0 * 1024;
  else if (unit == "G" || unit == "g")
    mult = 1024.0 * 1024 * 1024;
  else if (unit == "T" || unit == "t")
    mult = 1024.0 * 1024 * 1024 * 1024;
  else if (!unit.empty())
    d = -1;
  if (v.empty() || end == v.c_str() || !std::isfinite(d) || d < 0) {
    return Status::Errorf("%s %s: not a size (use e.g. 2M, 256M, 64G)", flag.c_str(), v.c_str());
  }
  return d * mult;
}

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

struct Cli {
  BenchOptions options;
  std::string profile = "h200-pcie5";
  std::string profile_dir = DefaultProfileDir();
  std::string model = "llama-3.1-8b";
  std::vector<std::string> systems = AllSystems();
  std::string output = "multiround-out";
  double ttft_target = 2.0;
  std::string ttft_stat = "p90";
  std::vector<int> sweep;
};

Status Parse(int argc, char** argv, Cli* cli) {
  std::map<std::string, std::string> kv;
  BenchOptions& o = cli->options;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0)
      return Status::Errorf("%s: unexpected argument (see --help)", argv[i]);
    if (a == "--enforce-strict-concurrent-users") {
      o.workload.strict_concurrent_users = true;
      continue;
    }
    std::string value;
    if (!FlagValue(argc, argv, &i, &a, &value)) {
      return Status::Errorf("%s needs a value (see --help)", a.c_str());
    }
    kv[a] = value;
  }
  for (const auto& entry : kv) {
    // Plain references, not a structured binding: the lambdas below capture
    // them, which clang before 16 does not allow for bindings.
    const std::string& flag = entry.first;
    const std::string& v = entry.second;
    auto num = [&](double* out) -> Status {
      Result<double> r = ParseNumber(flag, v);
      if (!r.ok()) return r.status();
      *out = r.value();
      return Status::Ok();
    };
    auto integer = [&](int* out, int min) -> Status {
      double d = 0;
      Status st = num(&d);
      if (!st.ok()) return st;
      if (d != std::floor(d) || d < min || d > 1e9) {
        return Status::Errorf("%s %s: need a whole number >= %d", flag.c_str(), v.c_str(), min);
      }
      *out = static_cast<int>(d);
      return Status::Ok();
    };
    auto size = [&](double* out) -> Status {
      Result<double> r = ParseSize(flag, v);
      if (!r.ok()) return r.status();
      *out = r.value();
      return Status::Ok();
    };
    Status st;
    double d = 0;
    WorkloadConfig& w = o.workload;
    if (flag == "--num-users")
      st = integer(&w.num_users, 1);
    else if (flag == "--shared-system-prompt")
      st = integer(&w.shared_system_prompt, 0);
    else if (flag == "--user-history-prompt")
      st = integer(&w.user_history_prompt, 0);
    else if (flag == "--answer-len")
      st = integer(&w.answer_len, 1);
    else if (flag == "--num-rounds")
      st = integer(&w.num_rounds, 1);
    else if (flag == "--qps")
      st = num(&w.qps);
    else if (flag == "--time")
      st = num(&w.time_s);
    else if (flag == "--warmup")
      st = num(&w.warmup_s);
    else if (flag == "--think-time") {
      if (v != "fixed" && v != "exp")
        return Status::Errorf("--think-time %s: use fixed or exp", v.c_str());
      o.workload.exponential_think_time = v == "exp";
    } else if (flag == "--seed") {
      int seed = 0;
      st = integer(&seed, 0);
      o.workload.seed = static_cast<uint64_t>(seed);
    } else if (flag == "--question-len")
      st = integer(&w.question_len, 1);
    else if (flag == "--init-user-id")
      st = integer(&w.init_user_id, 0);
    else if (flag == "--profile")
      cli->profile = v;
    else if (flag == "--profile-dir")
      cli->profile_dir = v;
    else if (flag == "--model")
      cli->model = v;
    else if (flag == "--tp")
      st = integer(&o.engine.tp, 1);
    else if (flag == "--block-size")
      st = integer(&o.engine.block_tokens, 1);
    else if (flag == "--max-num-seqs")
      st = integer(&o.engine.max_num_seqs, 1);
    else if (flag == "--max-num-batched-tokens")
      st = integer(&o.engine.max_batched_tokens, 1);
    else if (flag == "--systems")
      cli->systems = Split(v);
    else if (flag == "--hints-policy")
      o.hints_policy = v;
    else if (flag == "--admission") {
      if (v != "device" && v != "pool")
        return Status::Errorf("--admission %s: use device or pool", v.c_str());
      o.device_fit_admission = v == "device";
    } else if (flag == "--page-size") {
      st = size(&d);
      o.page_size = static_cast<size_t>(d);
    } else if (flag == "--tick-ms") {
      int ms = 0;
      st = integer(&ms, 1);
      o.tick.tick_ns = uint64_t(ms) * 1'000'000;
    } else if (flag == "--move-bytes-per-tick") {
      st = size(&d);
      o.tick.mover.cap_bytes = static_cast<uint64_t>(d);
    } else if (flag == "--link-share") {
      int pct = 0;
      st = integer(&pct, 1);
      if (st.ok() && pct > 100) st = Status::Errorf("--link-share %s: use 1..100", v.c_str());
      o.tick.mover.share_pct = static_cast<uint32_t>(pct);
    } else if (flag == "--high-watermark")
      st = integer(&o.tick.high_watermark, 1);
    else if (flag == "--low-watermark")
      st = integer(&o.tick.low_watermark, 0);
    else if (flag == "--oversubscribe")
      st = num(&o.oversubscribe);
    else if (flag == "--host-budget")
      st = size(&o.host_budget_bytes);
    else if (flag == "--disk-budget")
      st = size(&o.disk_budget_bytes);
    else if (flag == "--output")
      cli->output = v;
    else if (flag == "--ttft-target")
      st = num(&cli->ttft_target);
    else if (flag == "--ttft-stat")
      cli->ttft_stat = v;
    else if (flag == "--sweep-users") {
      for (const std::string& n : Split(v)) {
        int u = atoi(n.c_str());
        if (u < 1) return Status::Errorf("--sweep-users %s: need user counts >= 1", v.c_str());
        cli->sweep.push_back(u);
      }
    } else {
      return Status::Errorf("%s: unknown option (see --help)", flag.c_str());
    }
    if (!st.ok()) return st;
  }
  if (o.workload.qps <= 0) return Status::Error("--qps must be > 0");
  if (o.tick.low_watermark >= o.tick.high_watermark || o.tick.high_watermark > 100) {
    return Status::Error("--low-watermark must be below --high-watermark (at most 100)");
  }
  double unused;
  if (!TtftStat(Summary{}, cli->ttft_stat, &unused)) {
    return Status::Errorf("--ttft-stat %s: use mean, p50, p90 or p99", cli->ttft_stat.c_str());
  }
  for (const std::string& s : cli->systems) {
    Status st = CheckSystemName(s);
    if (!st.ok()) return st;
  }
  Result<HardwareProfile> p = LoadProfile(cli->profile, cli->profile_dir);
  if (!p.ok()) return p.status();
  o.profile = p.value();
  Result<ModelShape> shape = FindModelShape(cli->model);
  if (!shape.ok()) return shape.status();
  o.engine.shape = shape.value();
  if (o.engine.shape.kv_heads % o.engine.tp != 0) {
    return Status::Errorf("--tp %d: must divide the model's %d KV heads", o.engine.tp,
                          o.engine.shape.kv_heads);
  }
  o.engine.prefill_flops = o.profile.dense_bf16_flops * o.profile.prefill_mfu;
  o.engine.hbm_bps = o.profile.gpu_memory_bandwidth_bps;
  o.engine.step_overhead_s = o.profile.step_overhead_ns / 1e9;
  return Status::Ok();
}

void PrintScenario(FILE* out, const Cli& cli, const Sizing& s) {
  const BenchOptions& o = cli.options;
  const WorkloadConfig& w = o.workload;
  // The KV a session holds at its last round, times the users.
  const double tokens = w.shared_system_prompt + w.user_history_prompt +
                        w.num_rounds * (w.answer_len + w.question_len);
  const double working_set = w.num_users * tokens * o.engine.kv_bytes_per_token();
  fprintf(out, "profile %s (%s); model %s tp=%d: %.0f KiB of KV per token, weights %.1f GB\n",
          o.profile.name.c_str(), o.profile.description.c_str(), o.engine.shape.name.c_str(),
          o.engine.tp, o.engine.kv_bytes_per_token() / 1024, o.engine.weight_bytes() / 1e9);
  fprintf(out,
          "HBM for KV %.1f GB (hbm-only pool %llu blocks); host tier %.0f GB, disk tier %.0f GB; "
          "oversubscribed pool %.0f GB\n",
          s.device_kv_bytes / 1e9, (unsigned long long)s.hbm_pool_blocks, s.host_budget_bytes / 1e9,
          s.disk_budget_bytes / 1e9, s.kvtier_pool_blocks * o.engine.block_bytes() / 1e9);
  fprintf(out,
          "workload: %d users, %d rounds, system %d + history %d, answer %d, qps %g; "
          "measured %g s after a %g s warm-up\n",
          w.num_users, w.num_rounds, w.shared_system_prompt, w.user_history_prompt, w.answer_len,
          w.qps, w.time_s, w.warmup_s < 0 ? w.num_users / w.qps : w.warmup_s);
  fprintf(out, "KV working set at the last round %.1f GB = %.1fx the HBM for KV\n\n",
          working_set / 1e9, working_set / s.device_kv_bytes);
}

Result<std::vector<SystemResult>> RunAll(const Cli& cli, const BenchOptions& o, bool quiet) {
  std::vector<SystemResult> results;
  for (const std::string& name : cli.systems) {
    Result<SystemResult> r = RunSystem(name, o);
    if (!r.ok()) return r.status();
    if (!quiet) {
      fprintf(stderr, "  %-22s %5zu requests in %.1f s\n", name.c_str(), r.value().rows.size(),
              r.value().wall_s);
    }
    results.push_back(std::move(r).value());
  }
  return results;
}

Status Sweep(const Cli& cli, FILE* out) {
  std::map<std::string, int> held;
  fprintf(out, "\nTTFT %s (s) by number of users (target %.3g s):\n%-20s", cli.ttft_stat.c_str(),
          cli.ttft_target, "system");
  for (int u : cli.sweep) fprintf(out, " %8d", u);
  fprintf(out, " | held\n");
  std::map<std::string, std::vector<double>> table;
  for (int users : cli.sweep) {
    BenchOptions o = cli.options;
    o.workload.num_users = users;
    fprintf(stderr, "sweep: %d users\n", users);
    Result<std::vector<SystemResult>> rs = RunAll(cli, o, false);
    if (!rs.ok()) return rs.status();
    for (const SystemResult& r : rs.value()) {
      double v = 0;
      TtftStat(Summarize(r), cli.ttft_stat, &v);
      table[r.name].push_back(v);
      if (v <= cli.ttft_target) held[r.name] = std::max(held[r.name], users);
    }
  }
  for (const std::string& name : cli.systems) {
    fprintf(out, "%-20s", name.c_str());
    for (double v : table[name]) fprintf(out, " %8.3f", v);
    fprintf(out, " | %d\n", held.count(name) ? held[name] : 0);
  }
  return Status::Ok();
}

}  // namespace

int RunMultiroundBench(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      fputs(kUsage, stdout);
      return 0;
    }
  }
  Cli cli;
  Status st = Parse(argc, argv, &cli);
  if (!st.ok()) {
    fprintf(stderr, "kvtier-bench multiround: %s\n", st.message().c_str());
    return 2;
  }
  Result<Sizing> sizing = ComputeSizing(cli.options);
  if (!sizing.ok()) {
    fprintf(stderr, "kvtier-bench multiround: %s\n", sizing.status().message().c_str());
    return 2;
  }
  std::error_code ec;
  std::filesystem::create_directories(cli.output, ec);
  if (ec) {
    fprintf(stderr, "kvtier-bench multiround: --output %s: %s\n", cli.output.c_str(),
            ec.message().c_str());
    return 2;
  }
  const auto t0 = std::chrono::steady_clock::now();
  PrintScenario(stdout, cli, sizing.value());
  Result<std::vector<SystemResult>> results = RunAll(cli, cli.options, false);
  if (!results.ok()) {
    fprintf(stderr, "kvtier-bench multiround: %s\n", results.status().message().c_str());
    return 1;
  }
  const std::vector<SystemResult>& rs = results.value();
  const std::string dir = cli.output + "/";
  FILE* summary = fopen((dir + "summary.txt").c_str(), "w");
  for (FILE* out : {stdout, summary}) {
    if (!out) continue;
    if (out == summary) PrintScenario(out, cli, sizing.value());
    PrintSummaryTable(out, rs, cli.ttft_stat, cli.ttft_target);
  }
  std::vector<Status> writes;
  writes.push_back(WriteSummaryCsv(dir + "summary.csv", rs));
  for (const SystemResult& r : rs) {
    writes.push_back(WriteRequestsCsv(dir + "requests-" + FileSafe(r.name) + ".csv", r));
  }
  const std::string title = cli.options.profile.name + ", " + cli.options.engine.shape.name + ", " +
                            std::to_string(cli.options.workload.num_users) + " users";
  writes.push_back(WriteTtftCdfSvg(dir + "ttft_cdf.svg", rs, "TTFT CDF: " + title));
  writes.push_back(WriteOccupancySvg(dir + "occupancy.svg", rs, "Tier occupancy: " + title));
  if (!cli.sweep.empty()) {
    FILE* sweep = fopen((dir + "sweep.txt").c_str(), "w");
    Status s = Sweep(cli, sweep ? sweep : stdout);
    if (sweep) fclose(sweep);
    if (s.ok() && sweep) {
      FILE* in = fopen((dir + "sweep.txt").c_str(), "r");
      char line[512];
      while (in && fgets(line, sizeof line, in)) fputs(line, stdout);
      if (in) fclose(in);
    }
    writes.push_back(s);
  }
  if (summary) fclose(summary);
  int rc = 0;
  for (const Status& w : writes) {
    if (!w.ok()) {
      fprintf(stderr, "kvtier-bench multiround: %s\n", w.message().c_str());
      rc = 1;
    }
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  printf(
      "\nwrote %s{summary.txt,summary.csv,requests-*.csv,ttft_cdf.svg,occupancy.svg}; "
      "run time %.1f s\n",
      dir.c_str(), wall);
  return rc;
}

}  // namespace kvtier::bench
