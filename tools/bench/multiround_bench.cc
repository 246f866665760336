// kvtier-bench multiround: LMBenchmark's synthetic multi-round QA on the
// model-only simulated GPU, every compared system on the same trace; or,
// with --endpoint, the same trace played in real time against an
// OpenAI-compatible server (endpoint_run.h).
//
// Options use LMBenchmark's names for the workload; the rest choose the
// hardware profile, the model shape, the systems and kvtier's settings.
// Output (in --output): summary.txt and summary.csv (one row per system),
// requests-<system>.csv (one row per measured request), ttft_cdf.svg and
// occupancy.svg; with --sweep-users, sweep.txt (the most users each system
// holds at the TTFT target). With --endpoint: summary.txt, summary.csv,
// requests-<label>.csv, ttft_cdf.svg and answers.txt (every answer, by user
// and round). Thread-safety: main thread only.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "runtime/options.h"  // ParseList
#include "tools/bench/bench_args.h"
#include "tools/bench/endpoint_run.h"
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
    "                         holds at the TTFT target)\n"
    "a real server instead of the model (the workload options above apply; no systems):\n"
    "  --endpoint http://HOST:PORT/v1 (an OpenAI-compatible server: vLLM, SGLang, llama-server)\n"
    "  --model NAME (the served model; default: the first GET /v1/models lists)\n"
    "  --label NAME (endpoint: the run's name in tables and file names)\n"
    "  --request-timeout S (120: a request whose server says nothing for S s fails)\n"
    "  --quiet (no line per answer on stderr)\n"
    "  --combine DIR,DIR,... (no run: the --endpoint runs in those --output directories in one\n"
    "                         table and one TTFT CDF, written to --output)\n"
    "  --baseline LABEL (with --combine: each run's TTFT against this run's)\n";

struct Cli {
  BenchOptions options;
  std::string profile = "h200-pcie5";
  std::string profile_dir = DefaultProfileDir();
  std::string model;  // the model's shape; with --endpoint, the served model
  std::vector<std::string> systems = AllSystems();
  std::string endpoint, label = "endpoint";
  std::vector<std::string> combine;
  std::string baseline;
  double request_timeout = 120;
  bool quiet = false;
  std::string output = "multiround-out";
  double ttft_target = 2.0;
  std::string ttft_stat = "p90";
  std::vector<int> sweep;
};

// The flags, with where each value goes; checks across flags follow in Check.
Flags MakeFlags(Cli* cli) {
  BenchOptions& o = cli->options;
  WorkloadConfig& w = o.workload;
  auto list = [](std::vector<std::string>* out) {
    return [out](const std::string& v) -> Status {
      Result<std::vector<std::string>> items = ParseList(v);
      if (!items.ok()) return items.status();
      *out = std::move(items).value();
      return Status::Ok();
    };
  };
  Flags flags("multiround");
  flags.Integer("--num-users", &w.num_users, 1)
      .Integer("--shared-system-prompt", &w.shared_system_prompt, 0)
      .Integer("--user-history-prompt", &w.user_history_prompt, 0)
      .Integer("--answer-len", &w.answer_len, 1)
      .Integer("--num-rounds", &w.num_rounds, 1)
      .Number("--qps", &w.qps)
      .Number("--time", &w.time_s)
      .Number("--warmup", &w.warmup_s)
      .Choice("--think-time", {"fixed", "exp"},
              [&w](const std::string& v) { w.exponential_think_time = v == "exp"; })
      .Integer("--seed", &w.seed, 0, std::numeric_limits<int64_t>::max())
      .Integer("--question-len", &w.question_len, 1)
      .Integer("--init-user-id", &w.init_user_id, 0)
      .Switch("--enforce-strict-concurrent-users", &w.strict_concurrent_users)
      .Text("--profile", &cli->profile)
      .Text("--profile-dir", &cli->profile_dir)
      .Text("--model", &cli->model)
      .Integer("--tp", &o.engine.tp, 1)
      .Integer("--block-size", &o.engine.block_tokens, 1)
      .Integer("--max-num-seqs", &o.engine.max_num_seqs, 1)
      .Integer("--max-num-batched-tokens", &o.engine.max_batched_tokens, 1)
      .Custom("--systems", list(&cli->systems))
      .Text("--hints-policy", &o.hints_policy)
      .Choice("--admission", {"device", "pool"},
              [&o](const std::string& v) { o.device_fit_admission = v == "device"; })
      .Size("--page-size", &o.page_size, 1)
      .Integer("--tick-ms", 1, 1'000'000,
               [&o](int64_t ms) { o.tick.tick_ns = static_cast<uint64_t>(ms) * 1'000'000; })
      .Size("--move-bytes-per-tick", &o.tick.mover.cap_bytes)
      .Integer("--link-share", &o.tick.mover.share_pct, 1, 100)
      .Integer("--high-watermark", &o.tick.high_watermark, 1, 100)
      .Integer("--low-watermark", &o.tick.low_watermark, 0, 99)
      .Number("--oversubscribe", &o.oversubscribe)
      .Size("--host-budget", &o.host_budget_bytes)
      .Size("--disk-budget", &o.disk_budget_bytes)
      .Text("--output", &cli->output)
      .Number("--ttft-target", &cli->ttft_target)
      .Text("--ttft-stat", &cli->ttft_stat)
      .Text("--endpoint", &cli->endpoint)
      .Text("--label", &cli->label)
      .Number("--request-timeout", &cli->request_timeout)
      .Switch("--quiet", &cli->quiet)
      .Custom("--combine", list(&cli->combine))
      .Text("--baseline", &cli->baseline)
      .Custom("--sweep-users", [cli](const std::string& v) -> Status {
        Result<std::vector<std::string>> items = ParseList(v);
        if (!items.ok()) return items.status();
        cli->sweep.clear();
        for (const std::string& n : items.value()) {
          char* end = nullptr;
          const long u = strtol(n.c_str(), &end, 10);
          if (*end != '\0' || u < 1 || u > 1'000'000) return Status::Error("need user counts >= 1");
          cli->sweep.push_back(static_cast<int>(u));
        }
        return Status::Ok();
      });
  return flags;
}

// What no single flag can check, and the profile and model the names choose.
Status Check(Cli* cli) {
  BenchOptions& o = cli->options;
  if (o.workload.qps <= 0) return Status::Error("--qps must be > 0");
  if (o.tick.low_watermark >= o.tick.high_watermark || o.tick.high_watermark > 100) {
    return Status::Error("--low-watermark must be below --high-watermark (at most 100)");
  }
  if (!cli->combine.empty() && !cli->endpoint.empty()) {
    return Status::Error("--combine reads earlier runs: leave --endpoint out");
  }
  if (!cli->combine.empty()) return Status::Ok();
  if (!cli->baseline.empty()) return Status::Error("--baseline goes with --combine");
  if (!cli->endpoint.empty()) {
    if (cli->request_timeout <= 0) return Status::Error("--request-timeout must be > 0");
    const bool plain =
        !cli->label.empty() && std::all_of(cli->label.begin(), cli->label.end(), [](char c) {
          return isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
        });
    if (!plain) {
      return Status::Errorf("--label '%s': use letters, digits, '-' and '_'", cli->label.c_str());
    }
    return Status::Ok();
  }
  if (cli->model.empty()) cli->model = "llama-3.1-8b";
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

// --endpoint: the trace against a server; its table, CSV files, CDF and
// answers.
int RunEndpoint(const Cli& cli) {
  const char* me = "kvtier-bench multiround";
  Result<Endpoint> endpoint = ParseEndpoint(cli.endpoint);
  if (!endpoint.ok()) {
    fprintf(stderr, "%s: %s\n", me, endpoint.status().message().c_str());
    return 2;
  }
  EndpointRunConfig config;
  config.workload = cli.options.workload;
  config.endpoint = endpoint.value();
  config.label = cli.label;
  config.timeout_s = cli.request_timeout;
  config.quiet = cli.quiet;
  config.model = cli.model;
  if (config.model.empty()) {
    Result<std::string> first = FirstModel(config.endpoint, cli.request_timeout);
    if (!first.ok()) {
      fprintf(stderr, "%s: %s\n", me, first.status().message().c_str());
      return 1;
    }
    config.model = first.value();
  }
  std::error_code ec;
  std::filesystem::create_directories(cli.output, ec);
  if (ec) {
    fprintf(stderr, "%s: --output %s: %s\n", me, cli.output.c_str(), ec.message().c_str());
    return 2;
  }
  const WorkloadConfig& w = config.workload;
  char header[512];
  snprintf(header, sizeof header,
           "endpoint %s, model %s; workload: %d users, %d rounds, system %d + history %d words, "
           "answer %d tokens, qps %g; measured %g s after a %g s warm-up\n\n",
           config.endpoint.Url().c_str(), config.model.c_str(), w.num_users, w.num_rounds,
           w.shared_system_prompt, w.user_history_prompt, w.answer_len, w.qps, w.time_s,
           w.warmup_s < 0 ? w.num_users / w.qps : w.warmup_s);
  fputs(header, stdout);
  fflush(stdout);
  Result<EndpointRun> run = RunAgainstEndpoint(config);
  if (!run.ok()) {
    fprintf(stderr, "%s: %s\n", me, run.status().message().c_str());
    return 1;
  }
  const std::vector<SystemResult> rs = {run.value().result};
  const std::string dir = cli.output + "/";
  FILE* summary = fopen((dir + "summary.txt").c_str(), "w");
  for (FILE* out : {stdout, summary}) {
    if (!out) continue;
    if (out == summary) fputs(header, out);
    PrintEndpointTable(out, rs);
  }
  if (summary) fclose(summary);
  std::vector<Status> writes;
  writes.push_back(WriteSummaryCsv(dir + "summary.csv", rs));
  writes.push_back(WriteRequestsCsv(dir + "requests-" + FileSafe(cli.label) + ".csv", rs[0]));
  writes.push_back(
      WriteTtftCdfSvg(dir + "ttft_cdf.svg", rs,
                      "TTFT CDF: " + config.model + ", " + std::to_string(w.num_users) + " users"));
  FILE* answers = fopen((dir + "answers.txt").c_str(), "w");
  if (answers) {
    for (const std::string& line : run.value().answers) fprintf(answers, "%s\n", line.c_str());
  }
  writes.push_back(
      answers && fclose(answers) == 0
          ? Status::Ok()
          : Status::Errorf("%sanswers.txt: cannot write it (check --output)", dir.c_str()));
  int rc = 0;
  for (const Status& s : writes) {
    if (!s.ok()) {
      fprintf(stderr, "%s: %s\n", me, s.message().c_str());
      rc = 1;
    }
  }
  printf(
      "\n%d requests from %d users, %zu measured; wrote %s{summary.txt,summary.csv,requests-%s.csv,"
      "ttft_cdf.svg,answers.txt}\n",
      run.value().requests, run.value().users, rs[0].rows.size(), dir.c_str(),
      FileSafe(cli.label).c_str());
  return rc;
}

// --combine: earlier --endpoint runs in one table and one CDF.
int Combine(const Cli& cli) {
  const char* me = "kvtier-bench multiround";
  std::vector<SystemResult> rs;
  std::string names;
  bool have_baseline = cli.baseline.empty();
  for (const std::string& dir : cli.combine) {
    Result<SystemResult> r = ReadEndpointRun(dir);
    if (!r.ok()) {
      fprintf(stderr, "%s: --combine: %s\n", me, r.status().message().c_str());
      return 1;
    }
    have_baseline |= r.value().name == cli.baseline;
    names += (names.empty() ? "" : ", ") + r.value().name;
    rs.push_back(std::move(r).value());
  }
  if (!have_baseline) {
    fprintf(stderr, "%s: --baseline %s: no such run among %s\n", me, cli.baseline.c_str(),
            names.c_str());
    return 2;
  }
  std::error_code ec;
  std::filesystem::create_directories(cli.output, ec);
  const std::string dir = cli.output + "/";
  FILE* summary = fopen((dir + "summary.txt").c_str(), "w");
  for (FILE* out : {stdout, summary}) {
    if (out) PrintEndpointTable(out, rs, cli.baseline);
  }
  const bool wrote = summary && fclose(summary) == 0;
  Status svg = WriteTtftCdfSvg(dir + "ttft_cdf.svg", rs, "TTFT CDF: " + names);
  if (!wrote || !svg.ok()) {
    fprintf(stderr, "%s: %s\n", me,
            !svg.ok() ? svg.message().c_str() : (dir + "summary.txt: cannot write it").c_str());
    return 1;
  }
  printf("\nwrote %s{summary.txt,ttft_cdf.svg}\n", dir.c_str());
  return 0;
}

}  // namespace

int RunMultiroundBench(int argc, char** argv) {
  Cli cli;
  const Flags flags = MakeFlags(&cli);
  int exit_code = 0;
  if (!flags.ParseOrExit(argc, argv, kUsage, &exit_code)) return exit_code;
  if (Status st = Check(&cli); !st.ok()) return flags.Fail(st.message());
  if (!cli.combine.empty()) return Combine(cli);
  if (!cli.endpoint.empty()) return RunEndpoint(cli);
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
