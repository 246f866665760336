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
#include <vector>

#include "runtime/status.h"

namespace kvtier {

namespace option_types {
using Bool = bool;
using Size = uint64_t;
using Int = int64_t;
using Double = double;
using Enum = std::string;
using String = std::string;
using List = std::vector<std::string>;
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
// Fails on the first KVTIER_* entry of envp that names no option, suggesting
// the closest name (a typo such as KVTIER_PAGESIZE must not pass silently).
Status CheckUnknownVariables(char** envp);

// Writes a "KVTIER_X=<value>" line for every option to `out`, with
// "  (default)" after values equal to the default (KVTIER_VERBOSE>=1).
void DumpOptions(const Options& options, FILE* out);

// The README's variable table (Markdown), generated from options.def.
std::string OptionsMarkdownTable();

}  // namespace kvtier
