// The systems kvtier-bench multiround compares, and one simulation run.
//
// Every system runs the same engine model on the same workload trace; they
// differ in where the KV pool lives (KvBackend) and what decides placement:
//   hbm-only           HBM pool, LRU eviction of cached prefixes, recompute
//   uvm-default        oversubscribed managed memory, the driver's fault-driven
//                      migration and LRM eviction, no policy
//   explicit-offload   HBM pool + CPU store, synchronous load on a hit
//   kvtier:<policy>    the oversubscribed pool placed by a kvtier policy
//   kvtier:hints[+<policy>]  the same with the scheduler's WILL_NEED hints
//   oracle             the whole pool on the device at no transfer cost
// Sizing: the HBM left for KV is gpu_memory_utilization x memory - weights -
// activation reserve (vLLM's rule); it is the whole pool of hbm-only and
// explicit-offload and the device budget of the paged systems, whose pool adds
// oversubscribe x (host budget [+ disk budget for kvtier]). With device-fit
// admission the paged systems run no more requests at once than their KV
// fits in HBM: continuous batching over an oversubscribed pool otherwise
// decodes a running set larger than the device, and every step thrashes.
// Thread-safety: none.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/tick_engine.h"
#include "tools/bench/engine_model.h"
#include "tools/bench/hw_profile.h"
#include "tools/bench/workload.h"

namespace kvtier::bench {

struct BenchOptions {
  HardwareProfile profile;
  EngineConfig engine;
  WorkloadConfig workload;
  size_t page_size = 64u << 10;  // KVTIER_PAGE_SIZE
  TickEngineConfig tick;  // the runtime's defaults; the mover's link figures come from the profile
  double oversubscribe = 1.0;    // share of host (+disk) budgets added to the pool
  double host_budget_bytes = 0;  // 0: half the host memory (KVTIER_HOST_BUDGET=0)
  double disk_budget_bytes = 0;  // 0: no disk tier (KVTIER_DISK_BUDGET=0)
  // Base policy of kvtier:hints: one that makes room for hinted pages (lru
  // only promotes into free room below the high watermark).
  std::string hints_policy = "predictive";
  // Paged systems admit a request only while the running requests' KV fits
  // the device below its high watermark (as an operator sizes max_num_seqs
  // for HBM); false: only the oversubscribed pool limits the running set.
  bool device_fit_admission = true;
  double sample_interval_s = 0;  // occupancy samples; 0: automatic
};

struct Sizing {
  double device_kv_bytes = 0;  // HBM for KV
  double host_budget_bytes = 0;
  double disk_budget_bytes = 0;
  uint64_t hbm_pool_blocks = 0;
  uint64_t uvm_pool_blocks = 0;     // device + host
  uint64_t kvtier_pool_blocks = 0;  // device + host + disk
};
Result<Sizing> ComputeSizing(const BenchOptions& options);

struct RequestRow {
  int prompt_tokens = 0, generation_tokens = 0;
  double ttft = 0, generation_time = 0;
  int user_id = 0, question_id = 0;
  bool returning = false;  // Launch::returning
  double launch_time = 0, finish_time = 0;
  int hit_device = 0, hit_host = 0, hit_disk = 0, recomputed = 0;
};

struct SystemResult {
  std::string name;
  std::vector<RequestRow> rows;  // measured requests, in launch order
  std::vector<Occupancy> occupancy;
  MoveCounters moves;
  double wall_s = 0;
  double measure_start_s = 0, measure_end_s = 0;
  int64_t late_launches = 0, preemptions = 0, rejected = 0;
  uint64_t pool_bytes = 0;
  // False for a run read back from a requests CSV without the `returning`
  // column (written before it existed): its returning figures are unknown.
  bool knows_returning = true;
};

// Every system, in the order runs and tables show them.
std::vector<std::string> AllSystems();
// Checks a system name; says what is accepted.
Status CheckSystemName(const std::string& name);
Result<SystemResult> RunSystem(const std::string& name, const BenchOptions& options);

}  // namespace kvtier::bench
