// System construction and the simulation loop (see systems.h).
#include "tools/bench/systems.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "policies/cost_aware.h"
#include "policies/registry.h"
#include "tools/bench/kv_backends.h"

namespace kvtier::bench {
namespace {

constexpr const char* kKvtier = "kvtier:";
constexpr const char* kHints = "hints";

Result<std::unique_ptr<Policy>> MakeKvtierPolicy(const std::string& name, const BenchOptions& o) {
  if (name == "predictive-off") {  // KVTIER_POLICY=predictive KVTIER_PREDICT=0
    PolicySettings off;
    off.predict = false;
    return MakePolicy("predictive", off);
  }
  if (name == "cost-aware") {
    TieringOptions to;
    const HardwareProfile& p = o.profile;
    RestoreCosts c;
    c.host_ns_per_byte = 1e9 / p.fault_migration_bps;
    c.host_latency_ns = static_cast<uint64_t>(p.fault_batch_latency_ns);
    c.disk_ns_per_byte = 1e9 / std::max(p.ssd_read_bps, 1.0) + 1e9 / p.fault_migration_bps;
    c.disk_latency_ns = static_cast<uint64_t>(p.ssd_latency_ns + p.fault_batch_latency_ns);
    // Recomputing a token's KV costs at least its share of the weights' FLOPs.
    const double flops_per_token = 2 * o.engine.shape.params / o.engine.tp;
    c.recompute_ns_per_byte =
        flops_per_token / o.engine.prefill_flops * 1e9 / o.engine.kv_bytes_per_token();
    return std::unique_ptr<Policy>(new CostAwarePolicy(to, c));
  }
  std::unique_ptr<Policy> p = MakePolicy(name);
  if (!p) return Status::Errorf("kvtier:%s: unknown policy", name.c_str());
  return p;
}

ModelCosts DeviceCosts(const BenchOptions& o, const Sizing& s, bool uvm) {
  const HardwareProfile& p = o.profile;
  ModelCosts c;
  c.device_bytes = static_cast<uint64_t>(s.device_kv_bytes);
  c.host_bytes = uvm ? 0 : static_cast<uint64_t>(s.host_budget_bytes);  // UVM evicts to RAM
  c.disk_bytes = uvm ? 0 : static_cast<uint64_t>(s.disk_budget_bytes);
  c.h2d_bps = p.host_link_bps;
  c.d2h_bps = p.host_link_bps;
  c.fault_bps = p.fault_migration_bps;
  c.fault_batch_ns = static_cast<uint64_t>(p.fault_batch_latency_ns);
  c.fault_batch_blocks = static_cast<uint32_t>(std::max(1.0, p.fault_batch_pages));
  c.ssd_read_bps = p.ssd_read_bps;
  c.ssd_write_bps = p.ssd_write_bps;
  c.ssd_latency_ns = static_cast<uint64_t>(p.ssd_latency_ns);
  return c;
}

}  // namespace

std::vector<std::string> AllSystems() {
  return {"hbm-only",          "uvm-default",
          "explicit-offload",  "explicit-offload-layerwise",
          "kvtier:lru",        "kvtier:lfu-aging",
          "kvtier:s3fifo",     "kvtier:cost-aware",
          "kvtier:predictive", "kvtier:predictive-off",
          "kvtier:hints",      "oracle"};
}

Status CheckSystemName(const std::string& name) {
  if (name == "hbm-only" || name == "uvm-default" || name == "explicit-offload" ||
      name == "explicit-offload-layerwise" || name == "oracle") {
    return Status::Ok();
  }
  if (name.rfind(kKvtier, 0) == 0 && name.size() > 7) {
    std::string policy = name.substr(7);
    if (policy == kHints) return Status::Ok();
    if (policy.rfind(std::string(kHints) + "+", 0) == 0) policy = policy.substr(6);
    if (policy == "predictive-off" || policy == "cost-aware" || MakePolicy(policy)) {
      return Status::Ok();
    }
    std::string known;
    for (std::string_view n : PolicyNames())
      known += std::string(known.empty() ? "" : ", ") + std::string(n);
    return Status::Errorf("--systems: %s: unknown policy '%s' (use %s, predictive-off)",
                          name.c_str(), policy.c_str(), known.c_str());
  }
  return Status::Errorf(
      "--systems: unknown system '%s' (use hbm-only, uvm-default, "
      "explicit-offload[-layerwise], kvtier:<policy>, kvtier:hints[+<policy>], oracle)",
      name.c_str());
}

Result<Sizing> ComputeSizing(const BenchOptions& o) {
  const HardwareProfile& p = o.profile;
  Sizing s;
  s.device_kv_bytes = p.gpu_memory_utilization * p.gpu_memory_bytes - o.engine.weight_bytes() -
                      p.activation_reserve_bytes;
  if (s.device_kv_bytes < o.engine.block_bytes()) {
    return Status::Errorf(
        "profile %s: no HBM left for KV (%.1f GB x %.2f - %.1f GB of weights - "
        "%.1f GB of activations); use a larger GPU or more tensor parallelism",
        p.name.c_str(), p.gpu_memory_bytes / 1e9, p.gpu_memory_utilization,
        o.engine.weight_bytes() / 1e9, p.activation_reserve_bytes / 1e9);
  }
  s.host_budget_bytes = o.host_budget_bytes > 0 ? o.host_budget_bytes : p.host_memory_bytes / 2;
  s.disk_budget_bytes = std::min(o.disk_budget_bytes, p.ssd_bytes);
  const double bb = o.engine.block_bytes();
  s.hbm_pool_blocks = static_cast<uint64_t>(s.device_kv_bytes / bb);
  s.uvm_pool_blocks =
      static_cast<uint64_t>((s.device_kv_bytes + o.oversubscribe * s.host_budget_bytes) / bb);
  s.kvtier_pool_blocks = static_cast<uint64_t>(
      (s.device_kv_bytes + o.oversubscribe * (s.host_budget_bytes + s.disk_budget_bytes)) / bb);
  return s;
}

Result<SystemResult> RunSystem(const std::string& name, const BenchOptions& o) {
  Status st = CheckSystemName(name);
  if (!st.ok()) return st;
  Result<Sizing> sizing = ComputeSizing(o);
  if (!sizing.ok()) return sizing.status();
  const Sizing& s = sizing.value();
  const auto wall0 = std::chrono::steady_clock::now();

  Workload workload(o.workload);
  std::unique_ptr<KvBackend> backend;
  uint64_t pool_blocks = 0;
  if (name == "hbm-only" || name == "oracle") {
    // The oracle is the limit: the oversubscribed pool's prefixes, every
    // block on the device when a kernel needs it, at no transfer cost.
    pool_blocks = name == "oracle" ? s.kvtier_pool_blocks : s.hbm_pool_blocks;
    backend = std::make_unique<HbmBackend>(o.engine, pool_blocks);
  } else if (name.rfind("explicit-offload", 0) == 0) {
    pool_blocks = s.hbm_pool_blocks;
    OffloadConfig c;
    c.cpu_bytes = static_cast<uint64_t>(s.host_budget_bytes);
    c.disk_bytes = static_cast<uint64_t>(s.disk_budget_bytes);
    c.link_bps = o.profile.host_link_bps;
    c.ssd_read_bps = o.profile.ssd_read_bps;
    c.ssd_write_bps = o.profile.ssd_write_bps;
    c.layerwise = name == "explicit-offload-layerwise";
    c.shared_blocks = o.workload.shared_system_prompt / o.engine.block_tokens;
    backend = std::make_unique<OffloadBackend>(o.engine, pool_blocks, c);
  } else {
    const bool uvm = name == "uvm-default";
    std::unique_ptr<Policy> policy;
    bool hints = false;
    if (!uvm) {
      std::string policy_name = name.substr(7);
      if (policy_name.rfind(kHints, 0) == 0) {
        hints = true;
        policy_name = policy_name.size() > 6 && policy_name[5] == '+' ? policy_name.substr(6)
                                                                      : o.hints_policy;
      }
      Result<std::unique_ptr<Policy>> made = MakeKvtierPolicy(policy_name, o);
      if (!made.ok()) return made.status();
      policy = std::move(made).value();
    }
    pool_blocks = uvm ? s.uvm_pool_blocks : s.kvtier_pool_blocks;
    auto paged = std::make_unique<PagedBackend>(o.engine, DeviceCosts(o, s, uvm), pool_blocks,
                                                o.page_size, std::move(policy), o.tick, hints);
    Status init = paged->Init();
    if (!init.ok()) return init;
    backend = std::move(paged);
  }

  EngineConfig engine_config = o.engine;
  if (pool_blocks != s.hbm_pool_blocks && o.device_fit_admission) {
    engine_config.running_kv_limit_tokens =
        s.device_kv_bytes * o.tick.high_watermark / 100 / o.engine.kv_bytes_per_token();
  }
  EngineModel engine(engine_config, backend.get(), o.workload.shared_system_prompt);

  SystemResult result;
  result.name = name;
  result.measure_start_s = workload.measure_start();
  result.measure_end_s = workload.measure_end();
  result.pool_bytes = static_cast<uint64_t>(pool_blocks * o.engine.block_bytes());
  const double horizon = workload.measure_end();
  const double sample_dt = o.sample_interval_s > 0 ? o.sample_interval_s : horizon / 400;
  double next_sample = 0;

  std::vector<Launch> launches;
  std::vector<Request*> finished;
  for (;;) {
    const double tw = workload.NextEventTime();
    const double te = engine.NextStepTime();
    const double t = std::min(tw, te);
    if (t == Workload::kNever) break;
    while (next_sample <= t && next_sample <= horizon) {
      result.occupancy.push_back(backend->Sample(next_sample));
      next_sample += sample_dt;
    }
    backend->RunUntil(t);
    if (tw <= te) {
      launches.clear();
      workload.Advance(tw, &launches);
      for (const Launch& l : launches) engine.Submit(l);
      continue;
    }
    finished.clear();
    engine.Step(te, &finished);
    for (Request* r : finished) workload.OnFinish(r->session, std::max(r->finish_s, te));
  }

  for (const auto& r : engine.requests()) {
    if (!r->measured) continue;
    RequestRow row;
    row.prompt_tokens = r->prompt_tokens;
    row.generation_tokens = r->first_token_s < 0 ? 0 : r->generated;
    row.ttft = r->first_token_s < 0 ? -1 : r->first_token_s - r->launch_s;
    row.generation_time = r->finish_s < 0 ? -1 : r->finish_s - r->first_token_s;
    row.user_id = r->user_id;
    row.question_id = r->question_id;
    row.returning = r->returning;
    row.launch_time = r->launch_s;
    row.finish_time = r->finish_s;
    row.hit_device = r->hit_device;
    row.hit_host = r->hit_host;
    row.hit_disk = r->hit_disk;
    row.recomputed = r->recomputed;
    result.rows.push_back(row);
  }
  result.moves = backend->counters();
  result.late_launches = workload.late_launches();
  result.preemptions = engine.preemptions();
  result.rejected = engine.rejected();
  result.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  return result;
}

}  // namespace kvtier::bench
