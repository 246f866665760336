// Hardware profiles and model shapes for kvtier-bench multiround.
//
// A profile (tools/profiles/<name>.json) holds the figures the cost model
// needs; every field is {"value": number, "source": "where it comes from"}
// and a field without a source is refused, so no number enters the model
// unexplained. Model shapes come from the models' Hugging Face config.json.
// Thread-safety: plain values.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "runtime/status.h"

namespace kvtier::bench {

// X(member): every profile field, in the JSON under the same name.
#define KVTIER_PROFILE_FIELDS(X) \
  X(gpu_memory_bytes)            \
  X(gpu_memory_bandwidth_bps)    \
  X(dense_bf16_flops)            \
  X(prefill_mfu)                 \
  X(host_link_bps)               \
  X(fault_migration_bps)         \
  X(fault_batch_latency_ns)      \
  X(fault_batch_pages)           \
  X(host_memory_bytes)           \
  X(ssd_bytes)                   \
  X(ssd_read_bps)                \
  X(ssd_write_bps)               \
  X(ssd_latency_ns)              \
  X(gpu_memory_utilization)      \
  X(activation_reserve_bytes)    \
  X(step_overhead_ns)

struct HardwareProfile {
  std::string name;
  std::string description;
#define KVTIER_PROFILE_MEMBER(m) double m = 0;
  KVTIER_PROFILE_FIELDS(KVTIER_PROFILE_MEMBER)
#undef KVTIER_PROFILE_MEMBER
  std::map<std::string, std::string> sources;  // field name -> where its value comes from
};

// `name_or_path` is a file path (contains '/' or ends in .json) or a profile
// name looked up as <dir>/<name>.json.
Result<HardwareProfile> LoadProfile(const std::string& name_or_path, const std::string& dir);
// tools/profiles of the source tree this was built from.
std::string DefaultProfileDir();

// The profile as JSON in the form LoadProfile reads (every field with its
// value and source, in KVTIER_PROFILE_FIELDS order).
std::string ProfileJson(const HardwareProfile& p);

struct ModelShape {
  std::string name;
  int layers = 0;
  int hidden = 0;
  int heads = 0;  // query heads
  int kv_heads = 0;
  int head_dim = 0;
  double params = 0;  // parameters
  int dtype_bytes = 2;
  // Bytes of KV per token on one GPU at tensor parallelism `tp` (K and V,
  // every layer); KV heads split across GPUs.
  double KvBytesPerToken(int tp) const {
    return 2.0 * layers * (static_cast<double>(kv_heads) / tp) * head_dim * dtype_bytes;
  }
};

const std::vector<ModelShape>& ModelShapes();
Result<ModelShape> FindModelShape(const std::string& name);

}  // namespace kvtier::bench
