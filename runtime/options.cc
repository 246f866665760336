// Options: parses, checks, prints and documents the KVTIER_* variables, all
// generated from options.def, so a new row needs no code here unless it adds
// a rule beyond its type (see CheckField).
// Thread-safety: OptionTable is built once (a function-local static); the rest
// works on values the caller owns. ParseOptions(ProcessEnv()) reads environ,
// so it must not race with setenv.
#include "runtime/options.h"

#include <unistd.h>  // environ

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <type_traits>
#include <utility>

#include "runtime/numa_place.h"
#include "runtime/units.h"

namespace kvtier {

// Not in options.h yet; the unit test declares them too.
// Fails on the first KVTIER_* entry of `envp` that names no option, suggesting
// the closest name: a typo would otherwise be silently ignored.
Status CheckUnknownVariables(char** envp);
// Comma-separated items, spaces around them trimmed; no empty items.
Result<std::vector<std::string>> ParseList(std::string_view text);

namespace {

using namespace std::string_view_literals;

constexpr uint64_t kMinPageSize = uint64_t{64} << 10;
constexpr uint64_t kMaxPageSize = uint64_t{1} << 30;

// The rules below name these fields; renaming one must not silently drop them.
static_assert(std::is_same_v<decltype(Options::page_size), uint64_t>);
static_assert(std::is_same_v<decltype(Options::disk_dir), std::string>);
static_assert(std::is_same_v<decltype(Options::policy), std::string>);
static_assert(std::is_same_v<decltype(Options::low_watermark), int64_t>);
static_assert(std::is_same_v<decltype(Options::high_watermark), int64_t>);

std::string Upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// "NAME=VALUE: reason (accepted: ...)", the one form every option error takes.
Status Invalid(const OptionInfo& row, std::string_view text, std::string_view reason) {
  return Status::Error(row.env + "=" + EchoValue(text) + ": " + std::string(reason) +
                       " (accepted: " + row.accepted + ")");
}

Status Invalid(const OptionInfo& row, std::string_view text, const Status& reason) {
  return Invalid(row, text, reason.message());
}

// Reads "MIN..MAX" from the accepted column of an Int or Double row.
template <typename T>
bool ParseRange(std::string_view accepted, T* lo, T* hi) {
  size_t dots = accepted.find("..");
  if (dots == std::string_view::npos) return false;
  std::string_view a = accepted.substr(0, dots), b = accepted.substr(dots + 2);
  auto ra = std::from_chars(a.data(), a.data() + a.size(), *lo);
  auto rb = std::from_chars(b.data(), b.data() + b.size(), *hi);
  return ra.ec == std::errc() && ra.ptr == a.data() + a.size() && rb.ec == std::errc() &&
         rb.ptr == b.data() + b.size();
}

template <typename T>
Status ParseNumber(const OptionInfo& row, std::string_view text, const char* what, T* out) {
  T value{};
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec == std::errc::result_out_of_range && end == text.data() + text.size()) {
    return Invalid(row, text, "out of range");
  }
  if (ec != std::errc() || end != text.data() + text.size()) return Invalid(row, text, what);
  if constexpr (std::is_floating_point_v<T>) {
    if (!std::isfinite(value)) return Invalid(row, text, what);
  }
  T lo{}, hi{};
  if (!ParseRange(row.accepted, &lo, &hi)) {
    return Invalid(row, text, "options.def gives no MIN..MAX range for this option");
  }
  if (value < lo || value > hi) return Invalid(row, text, "out of range");
  *out = value;
  return Status::Ok();
}

// One parser per type token of options.def; the text is never empty here.
Status ParseBoolOption(const OptionInfo& row, std::string_view text, bool* out) {
  Result<bool> value = ParseBool(text);
  if (!value.ok()) return Invalid(row, text, value.status());
  *out = value.value();
  return Status::Ok();
}

Status ParseSizeOption(const OptionInfo& row, std::string_view text, uint64_t* out) {
  Result<uint64_t> value = ParseSize(text);
  if (!value.ok()) return Invalid(row, text, value.status());
  *out = value.value();
  return Status::Ok();
}

Status ParseIntOption(const OptionInfo& row, std::string_view text, int64_t* out) {
  return ParseNumber(row, text, "not an integer", out);
}

Status ParseDoubleOption(const OptionInfo& row, std::string_view text, double* out) {
  return ParseNumber(row, text, "not a number", out);
}

// Case-insensitive; stores the spelling of the accepted column.
Status ParseEnumOption(const OptionInfo& row, std::string_view text, std::string* out) {
  std::string_view accepted = row.accepted;
  const std::string wanted = Lower(text);
  while (!accepted.empty()) {
    size_t bar = accepted.find('|');
    std::string_view name = accepted.substr(0, bar);
    if (Lower(name) == wanted) {
      *out = std::string(name);
      return Status::Ok();
    }
    if (bar == std::string_view::npos) break;
    accepted.remove_prefix(bar + 1);
  }
  return Invalid(row, text, "unknown value");
}

constexpr std::pair<Backend, std::string_view> kBackendNames[] = {
    {Backend::kAuto, "auto"}, {Backend::kCuda, "cuda"}, {Backend::kSim, "sim"},
    {Backend::kHost, "host"}, {Backend::kOff, "off"},
};

// An Enum whose names options.def lists and kBackendNames maps.
Status ParseBackendOption(const OptionInfo& row, std::string_view text, Backend* out) {
  std::string name;
  if (Status s = ParseEnumOption(row, text, &name); !s.ok()) return s;
  for (const auto& [backend, spelled] : kBackendNames) {
    if (spelled == name) {
      *out = backend;
      return Status::Ok();
    }
  }
  return Invalid(row, text, "options.def accepts a backend that kvtier does not know");
}

Status ParseStringOption(const OptionInfo& row, std::string_view text, std::string* out) {
  *out = std::string(text);
  return Status::Ok();
}

Status ParseDeviceSizesOption(const OptionInfo& row, std::string_view text, DeviceSizes* out) {
  Result<DeviceSizes> value = ParseDeviceSizes(text);
  if (!value.ok()) return Invalid(row, text, value.status());
  *out = std::move(value).value();
  return Status::Ok();
}

// No List row exists yet; the parser is kept (and tested) for the first one.
[[maybe_unused]] Status ParseListOption(const OptionInfo& row, std::string_view text,
                                        std::vector<std::string>* out) {
  Result<std::vector<std::string>> value = ParseList(text);
  if (!value.ok()) return Invalid(row, text, value.status());
  *out = std::move(value).value();
  return Status::Ok();
}

// Rules beyond the type of a single option.
Status CheckField(const OptionInfo& row, std::string_view text, const Options& o) {
  const std::string_view field = row.field;
  if (field == "page_size") {
    if (o.page_size < kMinPageSize || o.page_size > kMaxPageSize) {
      return Invalid(row, text, "out of range");
    }
    if ((o.page_size & (o.page_size - 1)) != 0) return Invalid(row, text, "not a power of two");
  } else if (field == "disk_dir") {
    if (!o.disk_dir.starts_with('/')) return Invalid(row, text, "not an absolute path");
  } else if (field == "numa_node") {
    if (Result<NumaRequest> r = ParseNumaRequest(o.numa_node); !r.ok()) {
      return Invalid(row, text, r.status());
    }
  }
  return Status::Ok();
}

// Reads one option (or its default), parses it with `parse` and applies its
// extra rules. An empty value is an error, not "unset": `KVTIER_X=` is more
// likely a broken script than a wish for the default.
template <typename T>
Status ParseRow(const OptionInfo& row, const EnvLookup& env,
                Status (*parse)(const OptionInfo&, std::string_view, T*), T* out,
                const Options& options) {
  const char* value = env(row.env.c_str());
  std::string_view text = value != nullptr ? value : row.def;
  if (text.empty()) return Invalid(row, text, "empty value");
  if (Status s = parse(row, text, out); !s.ok()) return s;
  return CheckField(row, text, options);
}

const char* GetProcessEnv(const char* name) { return getenv(name); }

bool IsProcessEnv(const EnvLookup& env) {
  auto* fn = env.target<const char* (*)(const char*)>();
  return fn != nullptr && *fn == &GetProcessEnv;
}

// Optimal string alignment distance: like Levenshtein, and a swap of two
// neighbours ("BUGDET") costs 1.
size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

std::string FormatValue(bool v) { return v ? "1" : "0"; }
std::string FormatValue(uint64_t v) { return v == 0 ? "0" : FormatBytes(v); }
std::string FormatValue(int64_t v) { return std::to_string(v); }
std::string FormatValue(double v) {
  char buf[32];
  snprintf(buf, sizeof buf, "%g", v);
  return buf;
}
std::string FormatValue(const std::string& v) { return v; }
std::string FormatValue(const DeviceSizes& v) { return FormatDeviceSizes(v); }
std::string FormatValue(Backend v) { return BackendName(v); }
[[maybe_unused]] std::string FormatValue(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& item : v) s += (s.empty() ? "" : ",") + item;
  return s;
}

// GitHub tables end a cell at any unescaped '|', even inside backticks. In
// text cells '<' is escaped too, or "<pid>" would vanish as an HTML tag; in a
// code span a backslash is literal, so only the pipe is escaped there.
std::string EscapeCell(std::string_view s, bool code_span) {
  std::string out;
  for (char c : s) {
    if (c == '|' || (c == '<' && !code_span)) out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

const std::vector<OptionInfo>& OptionTable() {
  static const std::vector<OptionInfo> table = [] {
    std::vector<OptionInfo> t;
#define KVTIER_OPTION(field, type, def, accepted, doc) \
  t.push_back({#field, "KVTIER_" + Upper(#field), #type, def, accepted, doc});
#include "runtime/options.def"
#undef KVTIER_OPTION
    return t;
  }();
  return table;
}

EnvLookup ProcessEnv() { return &GetProcessEnv; }

const char* BackendName(Backend backend) {
  for (const auto& [b, name] : kBackendNames) {
    if (b == backend) return name.data();
  }
  return "?";
}

Status CheckUnknownVariables(char** envp) {
  constexpr std::string_view kPrefix = "KVTIER_";
  for (char** p = envp; p != nullptr && *p != nullptr; ++p) {
    std::string_view entry = *p;
    if (!entry.starts_with(kPrefix)) continue;
    size_t eq = entry.find('=');
    std::string_view name = entry.substr(0, eq);
    std::string_view value = eq == std::string_view::npos ? "" : entry.substr(eq + 1);
    const auto& table = OptionTable();
    if (std::any_of(table.begin(), table.end(),
                    [&](const OptionInfo& r) { return r.env == name; })) {
      continue;
    }
    // Compare what follows the prefix, so every name is not "close" by sharing it.
    const std::string typed = Upper(name.substr(kPrefix.size()));
    const OptionInfo* best = nullptr;
    size_t best_distance = SIZE_MAX;
    for (const OptionInfo& row : table) {
      size_t d = EditDistance(typed, std::string_view(row.env).substr(kPrefix.size()));
      if (d < best_distance) best = &row, best_distance = d;
    }
    // Beyond this a suggestion is a guess that misleads more than it helps.
    const size_t max_distance = std::max<size_t>(2, typed.size() / 3);
    std::string hint = best != nullptr && best_distance <= max_distance
                           ? "did you mean " + best->env + "?"
                           : "unset it; kvtier-config --markdown lists the KVTIER_* variables";
    return Status::Error(EchoValue(name) + "=" + EchoValue(value) + ": unknown variable (" + hint +
                         ")");
  }
  return Status::Ok();
}

Result<Options> ParseOptions(const EnvLookup& env) {
  const std::vector<OptionInfo>& table = OptionTable();
  Options o;
  size_t i = 0;
#define KVTIER_OPTION(field, type, def, accepted, doc)                                    \
  if (Status s = ParseRow(table[i++], env, &Parse##type##Option, &o.field, o); !s.ok()) { \
    return s;                                                                             \
  }
#include "runtime/options.def"
#undef KVTIER_OPTION
  if (o.low_watermark >= o.high_watermark) {
    return Status::Errorf("KVTIER_LOW_WATERMARK=%" PRId64
                          ": must be below KVTIER_HIGH_WATERMARK=%" PRId64
                          " (lower KVTIER_LOW_WATERMARK or raise KVTIER_HIGH_WATERMARK)",
                          o.low_watermark, o.high_watermark);
  }
  if (IsProcessEnv(env)) {
    if (Status s = CheckUnknownVariables(environ); !s.ok()) return s;
  }
  return o;
}

Result<bool> ParseBool(std::string_view text) {
  const std::string lower = Lower(text);
  for (std::string_view yes : {"1"sv, "true"sv, "on"sv, "yes"sv}) {
    if (lower == yes) return true;
  }
  for (std::string_view no : {"0"sv, "false"sv, "off"sv, "no"sv}) {
    if (lower == no) return false;
  }
  return Status::Error(text.empty() ? "empty value" : "not a boolean");
}

Result<std::vector<std::string>> ParseList(std::string_view text) {
  if (text.empty()) return Status::Error("empty value");
  std::vector<std::string> items;
  while (true) {
    size_t comma = text.find(',');
    std::string_view item = text.substr(0, comma);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (item.empty()) return Status::Error("empty item in the list");
    items.emplace_back(item);
    if (comma == std::string_view::npos) return items;
    text.remove_prefix(comma + 1);
  }
}

uint64_t DeviceSizes::For(int device) const {
  for (const auto& [ordinal, bytes] : listed) {
    if (ordinal == device) return bytes;
  }
  return all;
}

Result<DeviceSizes> ParseDeviceSizes(std::string_view text) {
  constexpr int kMaxOrdinal = 63;
  DeviceSizes sizes;
  if (text.find(':') == std::string_view::npos) {
    Result<uint64_t> all = ParseSize(text);
    if (!all.ok()) return all.status();
    sizes.all = all.value();
    return sizes;
  }
  Result<std::vector<std::string>> items = ParseList(text);
  if (!items.ok()) return items.status();
  for (const std::string& item : items.value()) {
    const size_t colon = item.find(':');
    if (colon == std::string::npos) {
      return Status::Error("'" + item +
                           "' is not ORDINAL:SIZE (write every item of a list as 0:40G)");
    }
    int ordinal = -1;
    const std::string_view number = std::string_view(item).substr(0, colon);
    auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), ordinal);
    if (ec != std::errc() || end != number.data() + number.size() || ordinal < 0 ||
        ordinal > kMaxOrdinal) {
      return Status::Errorf("'%s': the GPU ordinal must be a number from 0 to %d", item.c_str(),
                            kMaxOrdinal);
    }
    Result<uint64_t> bytes = ParseSize(std::string_view(item).substr(colon + 1));
    if (!bytes.ok()) return Status::Error("'" + item + "': " + bytes.status().message());
    for (const auto& seen : sizes.listed) {
      if (seen.first == ordinal) return Status::Errorf("GPU %d is listed twice", ordinal);
    }
    sizes.listed.emplace_back(ordinal, bytes.value());
  }
  std::sort(sizes.listed.begin(), sizes.listed.end());
  return sizes;
}

std::string FormatDeviceSizes(const DeviceSizes& sizes) {
  if (sizes.listed.empty()) return sizes.all == 0 ? "0" : FormatBytes(sizes.all);
  std::string s;
  for (const auto& [ordinal, bytes] : sizes.listed) {
    s += (s.empty() ? "" : ",") + std::to_string(ordinal) + ":" +
         (bytes == 0 ? "0" : FormatBytes(bytes));
  }
  return s;
}

void DumpOptions(const Options& options, FILE* out) {
  // A value equal to its default is marked, whether or not the variable is set.
  const Result<Options> defaults = ParseOptions([](const char*) -> const char* { return nullptr; });
  const std::vector<OptionInfo>& table = OptionTable();
  size_t i = 0;
#define KVTIER_OPTION(field, type, def, accepted, doc)                                    \
  {                                                                                       \
    bool is_default = defaults.ok() && options.field == defaults.value().field;           \
    fprintf(out, "%s=%s%s\n", table[i++].env.c_str(), FormatValue(options.field).c_str(), \
            is_default ? "  (default)" : "");                                             \
  }
#include "runtime/options.def"
#undef KVTIER_OPTION
}

std::string OptionsMarkdownTable() {
  std::string md =
      "| Variable | Default | Accepted | Description |\n"
      "|---|---|---|---|\n";
  for (const OptionInfo& row : OptionTable()) {
    md += "| `" + row.env + "` | `" + EscapeCell(row.def, true) + "` | " +
          EscapeCell(row.accepted, false) + " | " + EscapeCell(row.doc, false) + " |\n";
  }
  return md;
}

}  // namespace kvtier
