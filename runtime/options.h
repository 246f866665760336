// Options: the effective KVTIER_* configuration of this process.
//
// Generated from options.def. ParseOptions is the only place kvtier reads the
// environment. Errors name the variable, the value and the accepted form:
//   kvtier: KVTIER_PAGE_SIZE=3M: not a power of two (accepted: a power of two from 64K to 1G)
// Thread-safety: Options is a plain value; parse once, then share read-only.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/status.h"

namespace kvtier {

// A size for every GPU, or per GPU: "40G", or "0:40G,1:20G" (devices the
// list leaves out get the automatic size, 0).
struct DeviceSizes {
  uint64_t all = 0;                              // every device not listed
  std::vector<std::pair<int, uint64_t>> listed;  // (ordinal, bytes), ascending
  uint64_t For(int device) const;
  bool operator==(const DeviceSizes&) const = default;
};

// KVTIER_BACKEND, parsed once: the rest of kvtier compares these, never
// the text.
enum class Backend {
  kAuto,  // cuda when a device answers, else pass-through
  kCuda,  // the CUDA backend (managed memory on a real GPU)
  kSim,   // the simulated GPU (memfd + userfaultfd)
  kHost,  // a CPU engine's heap blocks (memfd + userfaultfd, spilled to SSD)
  kOff,   // every call passes through
};
// "auto", "cuda", "sim", "host", "off": the spelling KVTIER_BACKEND takes.
const char* BackendName(Backend backend);

namespace option_types {
using Bool = bool;
using Size = uint64_t;
using Int = int64_t;
using Double = double;
using Enum = std::string;
using String = std::string;
using List = std::vector<std::string>;
using DeviceSizes = kvtier::DeviceSizes;
using Backend = kvtier::Backend;
}  // namespace option_types

struct Options {
#define KVTIER_OPTION(field, type, def, accepted, doc) option_types::type field{};
#include "runtime/options.def"
#undef KVTIER_OPTION
};

// One row of the table, for the verbose dump, docs and tests.
struct OptionInfo {
  const char* field;     // "page_size"
  std::string env;       // "KVTIER_PAGE_SIZE"
  const char* type;      // "Size"
  const char* def;       // "2M"
  const char* accepted;  // "a power of two from 64K to 1G"
  const char* doc;
};
const std::vector<OptionInfo>& OptionTable();

// Returns the value of an environment variable, or nullptr when unset.
using EnvLookup = std::function<const char*(const char* name)>;
EnvLookup ProcessEnv();  // getenv; the only getenv in kvtier

// Parses every option from `env`. The first bad value fails with the one-line
// message (without the "kvtier: " prefix). Cross-field rules are checked too
// (low watermark below high watermark).
Result<Options> ParseOptions(const EnvLookup& env);

// Value parsers, exposed for tests (sizes: ParseSize in units.h).
Result<bool> ParseBool(std::string_view text);
// Comma-separated items, spaces around them trimmed; no empty items.
Result<std::vector<std::string>> ParseList(std::string_view text);
// "SIZE" or "ORDINAL:SIZE,ORDINAL:SIZE..." (ordinals 0..63, each once).
Result<DeviceSizes> ParseDeviceSizes(std::string_view text);
// For people, as KVTIER_VERBOSE=1 prints sizes: "40 GiB", "0:40 GiB,1:20 GiB",
// "0" when automatic everywhere.
std::string FormatDeviceSizes(const DeviceSizes& sizes);
// Fails on the first KVTIER_* entry of envp that names no option, suggesting
// the closest name (a typo such as KVTIER_PAGESIZE must not pass silently).
Status CheckUnknownVariables(char** envp);

// Writes a "KVTIER_X=<value>" line for every option to `out`, with
// "  (default)" after values equal to the default (KVTIER_VERBOSE>=1).
void DumpOptions(const Options& options, FILE* out);

// The README's variable table (Markdown), generated from options.def.
std::string OptionsMarkdownTable();

}  // namespace kvtier
