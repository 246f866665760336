// Profile loading and the table of model shapes (see hw_profile.h).
#include "tools/bench/hw_profile.h"

#include <boost/property_tree/json_parser.hpp>
#include <boost/property_tree/ptree.hpp>
#include <cmath>
#include <cstdio>

#ifndef KVTIER_SOURCE_DIR
#define KVTIER_SOURCE_DIR "."
#endif

namespace kvtier::bench {

std::string DefaultProfileDir() { return std::string(KVTIER_SOURCE_DIR) + "/tools/profiles"; }

Result<HardwareProfile> LoadProfile(const std::string& name_or_path, const std::string& dir) {
  std::string path = name_or_path;
  const bool is_path = name_or_path.find('/') != std::string::npos ||
                       (name_or_path.size() > 5 && name_or_path.ends_with(".json"));
  if (!is_path) path = dir + "/" + name_or_path + ".json";
  boost::property_tree::ptree tree;
  try {
    boost::property_tree::read_json(path, tree);
  } catch (const std::exception& e) {
    return Status::Errorf("--profile %s: cannot read %s: %s (name a file, or a profile in %s)",
                          name_or_path.c_str(), path.c_str(), e.what(), dir.c_str());
  }
  HardwareProfile p;
  p.name = tree.get<std::string>("name", name_or_path);
  p.description = tree.get<std::string>("description", "");
#define KVTIER_PROFILE_READ(m)                                                                     \
  {                                                                                                \
    auto value = tree.get_optional<double>(#m ".value");                                           \
    auto source = tree.get_optional<std::string>(#m ".source");                                    \
    if (!value || !std::isfinite(*value) || *value < 0) {                                          \
      return Status::Errorf("%s: field %s needs a non-negative number in \"value\"", path.c_str(), \
                            #m);                                                                   \
    }                                                                                              \
    if (!source || source->empty()) {                                                              \
      return Status::Errorf("%s: field %s has no \"source\" (say where the number comes from)",    \
                            path.c_str(), #m);                                                     \
    }                                                                                              \
    p.m = *value;                                                                                  \
    p.sources[#m] = *source;                                                                       \
  }
  KVTIER_PROFILE_FIELDS(KVTIER_PROFILE_READ)
#undef KVTIER_PROFILE_READ
  if (p.gpu_memory_bytes <= 0 || p.host_link_bps <= 0 || p.fault_migration_bps <= 0 ||
      p.dense_bf16_flops <= 0 || p.prefill_mfu <= 0 || p.gpu_memory_bandwidth_bps <= 0) {
    return Status::Errorf("%s: memory, bandwidths, FLOP/s and prefill_mfu must be > 0",
                          path.c_str());
  }
  if (p.gpu_memory_utilization <= 0 || p.gpu_memory_utilization > 1) {
    return Status::Errorf("%s: gpu_memory_utilization %.3f is outside (0, 1]", path.c_str(),
                          p.gpu_memory_utilization);
  }
  return p;
}

namespace {

// A JSON string literal of s (quotes, backslashes and control bytes escaped).
std::string Quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char esc[8];
      snprintf(esc, sizeof esc, "\\u%04x", static_cast<unsigned char>(c));
      out += esc;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace

std::string ProfileJson(const HardwareProfile& p) {
  std::string out =
      "{\n  \"name\": " + Quoted(p.name) + ",\n  \"description\": " + Quoted(p.description);
  auto field = [&](const char* name, double value) {
    char number[64];
    snprintf(number, sizeof number, "%.15g", value);
    auto it = p.sources.find(name);
    out += ",\n  " + Quoted(name) + ": {\n    \"value\": " + number +
           ",\n    \"source\": " + Quoted(it == p.sources.end() ? "" : it->second) + "\n  }";
  };
#define KVTIER_PROFILE_WRITE(m) field(#m, p.m);
  KVTIER_PROFILE_FIELDS(KVTIER_PROFILE_WRITE)
#undef KVTIER_PROFILE_WRITE
  return out + "\n}\n";
}

// Hugging Face config.json of each model: num_hidden_layers, hidden_size,
// num_attention_heads, num_key_value_heads, head_dim; parameter counts from
// the model cards.
const std::vector<ModelShape>& ModelShapes() {
  static const std::vector<ModelShape> shapes = {
      {"llama-3.1-8b", 32, 4096, 32, 8, 128, 8.03e9, 2},
      {"llama-3.1-70b", 80, 8192, 64, 8, 128, 70.6e9, 2},
      {"qwen2.5-7b", 28, 3584, 28, 4, 128, 7.6e9, 2},
  };
  return shapes;
}

Result<ModelShape> FindModelShape(const std::string& name) {
  std::string names;
  for (const ModelShape& s : ModelShapes()) {
    if (s.name == name) return s;
    names += (names.empty() ? "" : "|") + s.name;
  }
  return Status::Errorf("--model %s: unknown model shape (use %s)", name.c_str(), names.c_str());
}

}  // namespace kvtier::bench
