// Tests for the KVTIER_* options: every type's good and bad forms, the extra
// rules, unknown-variable detection, the dump, the README table.
#include "runtime/options.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "policies/registry.h"

namespace kvtier {

namespace {

constexpr uint64_t kKiB = 1024, kMiB = kKiB << 10, kGiB = kMiB << 10, kTiB = kGiB << 10;

// An environment made of a map, for ParseOptions.
EnvLookup MapEnv(const std::map<std::string, std::string>& vars) {
  return [vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

const OptionInfo& Row(const std::string& env) {
  for (const OptionInfo& row : OptionTable()) {
    if (row.env == env) return row;
  }
  ADD_FAILURE() << env << " is not in options.def";
  return OptionTable().front();
}

std::string Error(const std::string& var, const std::string& value, const std::string& reason) {
  return var + "=" + value + ": " + reason + " (accepted: " + Row(var).accepted + ")";
}

// An envp array that owns its strings.
class Envp {
 public:
  explicit Envp(std::vector<std::string> entries) : entries_(std::move(entries)) {
    for (std::string& e : entries_) ptrs_.push_back(e.data());
    ptrs_.push_back(nullptr);
  }
  char** get() { return ptrs_.data(); }

 private:
  std::vector<std::string> entries_;
  std::vector<char*> ptrs_;
};

TEST(ParseBool, AcceptsTheUsualSpellingsInAnyCase) {
  for (const char* yes : {"1", "true", "TRUE", "True", "on", "ON", "yes", "Yes"}) {
    Result<bool> r = ParseBool(yes);
    ASSERT_TRUE(r.ok()) << yes;
    EXPECT_TRUE(r.value()) << yes;
  }
  for (const char* no : {"0", "false", "FALSE", "off", "Off", "no", "NO"}) {
    Result<bool> r = ParseBool(no);
    ASSERT_TRUE(r.ok()) << no;
    EXPECT_FALSE(r.value()) << no;
  }
  for (const char* bad : {"2", "y", "n", "enable", " 1", "1 ", "truee", "-1"}) {
    Result<bool> r = ParseBool(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().message(), "not a boolean") << bad;
  }
  ASSERT_FALSE(ParseBool("").ok());
  EXPECT_EQ(ParseBool("").status().message(), "empty value");
}

TEST(ParseList, SplitsOnCommasAndRejectsEmptyItems) {
  Result<std::vector<std::string>> r = ParseList("a,b c, d ");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r.value(), (std::vector<std::string>{"a", "b c", "d"}));
  r = ParseList("one");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value(), std::vector<std::string>{"one"});
  for (const char* bad : {"a,,b", ",a", "a,", " , a", ","}) {
    r = ParseList(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().message(), "empty item in the list") << bad;
  }
  ASSERT_FALSE(ParseList("").ok());
  EXPECT_EQ(ParseList("").status().message(), "empty value");
}

TEST(ParseOptions, DefaultsWhenUnset) {
  Result<Options> r = ParseOptions(MapEnv({}));
  ASSERT_TRUE(r.ok()) << r.status().message();
  const Options& o = r.value();
  EXPECT_EQ(o.backend, Backend::kAuto);
  EXPECT_EQ(o.page_size, 64 * kKiB);
  EXPECT_EQ(o.device_budget, DeviceSizes{});
  EXPECT_EQ(o.host_budget, 0u);
  EXPECT_EQ(o.disk_budget, 0u);
  EXPECT_EQ(o.disk_dir, "/var/tmp/kvtier");
  EXPECT_EQ(o.policy, "auto");  // the backend's: Runtime::Parts::auto_policy
  EXPECT_TRUE(o.predict);
  EXPECT_EQ(o.tick_ms, 10);
  EXPECT_EQ(o.high_watermark, 90);
  EXPECT_EQ(o.low_watermark, 75);
  EXPECT_EQ(o.move_bytes_per_tick, 0u);
  EXPECT_EQ(o.link_bandwidth, 0u);
  EXPECT_EQ(o.link_share, 100);
  EXPECT_EQ(o.match, "size>=32M,run>=3;lib~ggml,sym~llama_kv_cacheC,size>=1M");
  EXPECT_EQ(o.oversubscribe, 0.0);
  EXPECT_EQ(o.verbose, 0);
  EXPECT_TRUE(o.stats);
  EXPECT_FALSE(o.show_stats);
  EXPECT_EQ(o.sim_device_memory, 16 * kGiB);
  EXPECT_EQ(o.sim_device_name, "kvtier simulated GPU");
  EXPECT_EQ(o.sim_fault_threads, 1);
}

TEST(ParseOptions, AcceptsGoodValuesOfEveryType) {
  const struct {
    const char* var;
    const char* value;
    std::function<bool(const Options&)> holds;
  } cases[] = {
      {"KVTIER_BACKEND", "sim", [](const Options& o) { return o.backend == Backend::kSim; }},
      {"KVTIER_BACKEND", "CUDA", [](const Options& o) { return o.backend == Backend::kCuda; }},
      {"KVTIER_BACKEND", "Off", [](const Options& o) { return o.backend == Backend::kOff; }},
      {"KVTIER_BACKEND", "host", [](const Options& o) { return o.backend == Backend::kHost; }},
      {"KVTIER_POLICY", "LRU", [](const Options& o) { return o.policy == "lru"; }},
      {"KVTIER_PAGE_SIZE", "64K", [](const Options& o) { return o.page_size == 64 * kKiB; }},
      {"KVTIER_PAGE_SIZE", "4MiB", [](const Options& o) { return o.page_size == 4 * kMiB; }},
      {"KVTIER_PAGE_SIZE", "1G", [](const Options& o) { return o.page_size == kGiB; }},
      {"KVTIER_PAGE_SIZE", "65536", [](const Options& o) { return o.page_size == 64 * kKiB; }},
      {"KVTIER_DEVICE_BUDGET", "40GiB",
       [](const Options& o) {
         return o.device_budget == DeviceSizes{40 * kGiB, {}};
       }},
      {"KVTIER_DEVICE_BUDGET", "1:20G, 0:40G",
       [](const Options& o) {
         return o.device_budget.For(0) == 40 * kGiB && o.device_budget.For(1) == 20 * kGiB &&
                o.device_budget.For(2) == 0 && o.device_budget.listed.front().first == 0;
       }},
      {"KVTIER_DISK_BUDGET", "1T", [](const Options& o) { return o.disk_budget == kTiB; }},
      {"KVTIER_MOVE_BYTES_PER_TICK", "256M",
       [](const Options& o) { return o.move_bytes_per_tick == 256 * kMiB; }},
      {"KVTIER_LINK_BANDWIDTH", "50G",
       [](const Options& o) { return o.link_bandwidth == 50 * kGiB; }},
      {"KVTIER_LINK_SHARE", "60", [](const Options& o) { return o.link_share == 60; }},
      {"KVTIER_TICK_MS", "1", [](const Options& o) { return o.tick_ms == 1; }},
      {"KVTIER_TICK_MS", "10000", [](const Options& o) { return o.tick_ms == 10000; }},
      {"KVTIER_VERBOSE", "3", [](const Options& o) { return o.verbose == 3; }},
      {"KVTIER_OVERSUBSCRIBE", "0.5", [](const Options& o) { return o.oversubscribe == 0.5; }},
      {"KVTIER_OVERSUBSCRIBE", "64", [](const Options& o) { return o.oversubscribe == 64; }},
      {"KVTIER_OVERSUBSCRIBE", "1e1", [](const Options& o) { return o.oversubscribe == 10; }},
      {"KVTIER_STATS", "off", [](const Options& o) { return !o.stats; }},
      {"KVTIER_SHOW_STATS", "YES", [](const Options& o) { return o.show_stats; }},
      {"KVTIER_DISK_DIR", "/mnt/nvme0/kv",
       [](const Options& o) { return o.disk_dir == "/mnt/nvme0/kv"; }},
      {"KVTIER_SIM_DEVICE_NAME", "My GPU",
       [](const Options& o) { return o.sim_device_name == "My GPU"; }},
      {"KVTIER_MATCH", "size>=1G,index>=2",
       [](const Options& o) { return o.match == "size>=1G,index>=2"; }},
  };
  for (const auto& c : cases) {
    Result<Options> r = ParseOptions(MapEnv({{c.var, c.value}}));
    ASSERT_TRUE(r.ok()) << c.var << "=" << c.value << ": " << r.status().message();
    EXPECT_TRUE(c.holds(r.value())) << c.var << "=" << c.value;
  }
}

TEST(ParseOptions, RejectsBadValuesNamingVariableValueAndAcceptedForm) {
  const struct {
    const char* var;
    const char* value;
    const char* reason;
  } cases[] = {
      // Empty counts as bad, not as unset, for every type.
      {"KVTIER_BACKEND", "", "empty value"},
      {"KVTIER_PAGE_SIZE", "", "empty value"},
      {"KVTIER_TICK_MS", "", "empty value"},
      {"KVTIER_OVERSUBSCRIBE", "", "empty value"},
      {"KVTIER_STATS", "", "empty value"},
      {"KVTIER_DISK_DIR", "", "empty value"},
      {"KVTIER_SIM_DEVICE_NAME", "", "empty value"},
      // Enum.
      {"KVTIER_BACKEND", "gpu", "unknown value"},
      {"KVTIER_BACKEND", "sim ", "unknown value"},
      {"KVTIER_POLICY", "clock", "unknown value"},
      // Size and the page-size rules.
      {"KVTIER_PAGE_SIZE", "3M", "not a power of two"},
      {"KVTIER_PAGE_SIZE", "96K", "not a power of two"},
      {"KVTIER_PAGE_SIZE", "32K", "out of range"},
      {"KVTIER_PAGE_SIZE", "0", "out of range"},
      {"KVTIER_PAGE_SIZE", "2G", "out of range"},
      {"KVTIER_PAGE_SIZE", "1.5M", "not a whole number (write 1536M, not 1.5G)"},
      {"KVTIER_DEVICE_BUDGET", "-1G", "negative size"},
      {"KVTIER_DEVICE_BUDGET", "99999999999999999999G", "too large"},
      {"KVTIER_DEVICE_BUDGET", "0:40G,20G",
       "'20G' is not ORDINAL:SIZE (write every item of a list as 0:40G)"},
      {"KVTIER_DEVICE_BUDGET", "0:40G,0:20G", "GPU 0 is listed twice"},
      {"KVTIER_DEVICE_BUDGET", "64:1G", "'64:1G': the GPU ordinal must be a number from 0 to 63"},
      {"KVTIER_DEVICE_BUDGET", "x:1G", "'x:1G': the GPU ordinal must be a number from 0 to 63"},
      {"KVTIER_DEVICE_BUDGET", "0:40G,,1:2G", "empty item in the list"},
      {"KVTIER_DEVICE_BUDGET", "1:-2G", "'1:-2G': negative size"},
      {"KVTIER_HOST_BUDGET", "64Gb/s",
       "unknown size suffix \"Gb/s\" (use K, M, G or T, optionally with B or iB)"},
      // Int.
      {"KVTIER_TICK_MS", "0", "out of range"},
      {"KVTIER_TICK_MS", "10001", "out of range"},
      {"KVTIER_TICK_MS", "-5", "out of range"},
      {"KVTIER_TICK_MS", "99999999999999999999", "out of range"},
      {"KVTIER_TICK_MS", "1.5", "not an integer"},
      {"KVTIER_TICK_MS", "10ms", "not an integer"},
      {"KVTIER_TICK_MS", "+5", "not an integer"},
      {"KVTIER_TICK_MS", " 5", "not an integer"},
      {"KVTIER_VERBOSE", "4", "out of range"},
      {"KVTIER_HIGH_WATERMARK", "101", "out of range"},
      // Double.
      {"KVTIER_OVERSUBSCRIBE", "65", "out of range"},
      {"KVTIER_OVERSUBSCRIBE", "-0.5", "out of range"},
      {"KVTIER_OVERSUBSCRIBE", "1e999", "out of range"},
      {"KVTIER_OVERSUBSCRIBE", "nan", "not a number"},
      {"KVTIER_OVERSUBSCRIBE", "inf", "not a number"},
      {"KVTIER_OVERSUBSCRIBE", "1,5", "not a number"},
      {"KVTIER_OVERSUBSCRIBE", "half", "not a number"},
      // Bool.
      {"KVTIER_STATS", "maybe", "not a boolean"},
      {"KVTIER_SHOW_STATS", "2", "not a boolean"},
      // String rules.
      {"KVTIER_DISK_DIR", "var/tmp/kvtier", "not an absolute path"},
      {"KVTIER_DISK_DIR", "~/kv", "not an absolute path"},
  };
  for (const auto& c : cases) {
    Result<Options> r = ParseOptions(MapEnv({{c.var, c.value}}));
    ASSERT_FALSE(r.ok()) << c.var << "=" << c.value << " was accepted";
    EXPECT_EQ(r.status().message(), Error(c.var, c.value, c.reason));
  }
}

TEST(ParseOptions, MessageMatchesTheDocumentedForm) {
  Result<Options> r = ParseOptions(MapEnv({{"KVTIER_PAGE_SIZE", "3M"}}));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "KVTIER_PAGE_SIZE=3M: not a power of two (accepted: a power of two from 64K to 1G)");
}

TEST(ParseOptions, EveryBackendTheTableAcceptsParsesAndIsNamedBack) {
  // The accepted column of KVTIER_BACKEND and the Backend enum agree both ways.
  const auto& table = OptionTable();
  auto row = std::find_if(table.begin(), table.end(),
                          [](const OptionInfo& r) { return r.env == "KVTIER_BACKEND"; });
  ASSERT_NE(row, table.end());
  std::string_view accepted = row->accepted;
  std::set<Backend> seen;
  while (!accepted.empty()) {
    const size_t bar = accepted.find('|');
    const std::string name(accepted.substr(0, bar));
    Result<Options> r = ParseOptions(MapEnv({{"KVTIER_BACKEND", name}}));
    ASSERT_TRUE(r.ok()) << name << ": " << r.status().message();
    EXPECT_EQ(BackendName(r.value().backend), name);
    seen.insert(r.value().backend);
    accepted = bar == std::string_view::npos ? "" : accepted.substr(bar + 1);
  }
  EXPECT_EQ(seen.size(), 5u) << "each name a different backend";
  // And every backend has a name the table accepts.
  for (Backend b : {Backend::kAuto, Backend::kCuda, Backend::kSim, Backend::kHost, Backend::kOff}) {
    EXPECT_NE(
        ("|" + std::string(row->accepted) + "|").find("|" + std::string(BackendName(b)) + "|"),
        std::string::npos)
        << BackendName(b);
  }
}

TEST(ParseOptions, PolicyAcceptsTheRegisteredPolicies) {
  ASSERT_FALSE(PolicyNames().empty());
  std::string accepted = "auto";  // the backend's choice, then every registered one
  for (std::string_view name : PolicyNames()) {
    accepted += "|" + std::string(name);
    Result<Options> r = ParseOptions(MapEnv({{"KVTIER_POLICY", std::string(name)}}));
    ASSERT_TRUE(r.ok()) << name << ": " << r.status().message();
    EXPECT_EQ(r.value().policy, name);
  }
  EXPECT_STREQ(Row("KVTIER_POLICY").accepted, accepted.c_str());
}

TEST(ParseOptions, LowWatermarkMustBeBelowHigh) {
  const struct {
    const char* low;  // nullptr: unset
    const char* high;
    const char* error;  // nullptr: accepted
  } cases[] = {
      {"89", "90", nullptr},
      {"0", "1", nullptr},
      {"99", "100", nullptr},
      {nullptr, "76", nullptr},
      {"90", "90",
       "KVTIER_LOW_WATERMARK=90: must be below KVTIER_HIGH_WATERMARK=90 (lower "
       "KVTIER_LOW_WATERMARK or raise KVTIER_HIGH_WATERMARK)"},
      {"95", nullptr,
       "KVTIER_LOW_WATERMARK=95: must be below KVTIER_HIGH_WATERMARK=90 (lower "
       "KVTIER_LOW_WATERMARK or raise KVTIER_HIGH_WATERMARK)"},
      {nullptr, "50",
       "KVTIER_LOW_WATERMARK=75: must be below KVTIER_HIGH_WATERMARK=50 (lower "
       "KVTIER_LOW_WATERMARK or raise KVTIER_HIGH_WATERMARK)"},
  };
  for (const auto& c : cases) {
    std::map<std::string, std::string> vars;
    if (c.low) vars["KVTIER_LOW_WATERMARK"] = c.low;
    if (c.high) vars["KVTIER_HIGH_WATERMARK"] = c.high;
    Result<Options> r = ParseOptions(MapEnv(vars));
    const std::string where =
        std::string("low=") + (c.low ? c.low : "unset") + " high=" + (c.high ? c.high : "unset");
    if (c.error == nullptr) {
      EXPECT_TRUE(r.ok()) << where << ": " << r.status().message();
    } else {
      ASSERT_FALSE(r.ok()) << where;
      EXPECT_EQ(r.status().message(), c.error) << where;
    }
  }
}

TEST(CheckUnknownVariables, SuggestsTheClosestKnownName) {
  const struct {
    const char* entry;
    const char* error;  // nullptr: accepted
  } cases[] = {
      {"KVTIER_PAGESIZE=4M",
       "KVTIER_PAGESIZE=4M: unknown variable (did you mean KVTIER_PAGE_SIZE?)"},
      {"KVTIER_DEVICE_BUGDET=1G",
       "KVTIER_DEVICE_BUGDET=1G: unknown variable (did you mean KVTIER_DEVICE_BUDGET?)"},
      {"KVTIER_page_size=4M",
       "KVTIER_page_size=4M: unknown variable (did you mean KVTIER_PAGE_SIZE?)"},
      {"KVTIER_VERBOSITY=1", "KVTIER_VERBOSITY=1: unknown variable (did you mean KVTIER_VERBOSE?)"},
      {"KVTIER_DISKDIR=", "KVTIER_DISKDIR=: unknown variable (did you mean KVTIER_DISK_DIR?)"},
      {"KVTIER_SHOWSTATS", "KVTIER_SHOWSTATS=: unknown variable (did you mean KVTIER_SHOW_STATS?)"},
      {"KVTIER_FROBNICATE=1",
       "KVTIER_FROBNICATE=1: unknown variable (unset it; kvtier-config --markdown lists the "
       "KVTIER_* variables)"},
      {"KVTIER_=1",
       "KVTIER_=1: unknown variable (unset it; kvtier-config --markdown lists the KVTIER_* "
       "variables)"},
      {"KVTIER_PAGE_SIZE=3M", nullptr},  // known: values are ParseOptions' business
      {"KVTIER_SIM_DEVICE_NAME=x=y", nullptr},
      {"PATH=/usr/bin", nullptr},
      {"kvtier_pagesize=4M", nullptr},  // not our prefix: another program's
      {"MY_KVTIER_PAGESIZE=4M", nullptr},
  };
  for (const auto& c : cases) {
    Envp envp({"HOME=/root", c.entry, "TERM=xterm"});
    Status s = CheckUnknownVariables(envp.get());
    if (c.error == nullptr) {
      EXPECT_TRUE(s.ok()) << c.entry << ": " << s.message();
    } else {
      ASSERT_FALSE(s.ok()) << c.entry;
      EXPECT_EQ(s.message(), c.error) << c.entry;
    }
  }
}

TEST(CheckUnknownVariables, AcceptsEveryKnownNameAndEmptyEnvironments) {
  std::vector<std::string> entries;
  for (const OptionInfo& row : OptionTable()) entries.push_back(row.env + "=" + row.def);
  Envp envp(entries);
  EXPECT_TRUE(CheckUnknownVariables(envp.get()).ok());
  Envp empty({});
  EXPECT_TRUE(CheckUnknownVariables(empty.get()).ok());
  EXPECT_TRUE(CheckUnknownVariables(nullptr).ok());
}

// Clears every KVTIER_* variable of the test process for one test and puts
// them back after, so the outer environment cannot change the result.
class ScopedKvtierEnv {
 public:
  ScopedKvtierEnv() {
    for (char** p = environ; *p != nullptr; ++p) {
      std::string entry = *p;
      if (entry.starts_with("KVTIER_")) saved_.push_back(entry);
    }
    for (const std::string& e : saved_) unsetenv(e.substr(0, e.find('=')).c_str());
  }
  ~ScopedKvtierEnv() {
    for (const std::string& name : set_) unsetenv(name.c_str());
    for (const std::string& e : saved_) {
      size_t eq = e.find('=');
      setenv(e.substr(0, eq).c_str(), e.substr(eq + 1).c_str(), 1);
    }
  }
  void Set(const std::string& name, const std::string& value) {
    set_.push_back(name);
    setenv(name.c_str(), value.c_str(), 1);
  }

 private:
  std::vector<std::string> saved_;
  std::vector<std::string> set_;
};

TEST(ParseOptions, ProcessEnvironmentIsReadAndScannedForTypos) {
  ScopedKvtierEnv env;
  env.Set("KVTIER_PAGE_SIZE", "4M");
  Result<Options> r = ParseOptions(ProcessEnv());
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r.value().page_size, 4 * kMiB);

  env.Set("KVTIER_TICKMS", "20");
  r = ParseOptions(ProcessEnv());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "KVTIER_TICKMS=20: unknown variable (did you mean KVTIER_TICK_MS?)");
  // Other lookups are not the process environment, so environ is not scanned.
  EXPECT_TRUE(ParseOptions(MapEnv({})).ok());
}

std::string Dump(const Options& o) {
  char* buf = nullptr;
  size_t len = 0;
  FILE* f = open_memstream(&buf, &len);
  DumpOptions(o, f);
  fclose(f);
  std::string s(buf, len);
  free(buf);
  return s;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(DumpOptions, OneLinePerOptionMarkingDefaults) {
  Result<Options> r = ParseOptions(MapEnv({{"KVTIER_PAGE_SIZE", "4M"},
                                           {"KVTIER_BACKEND", "sim"},
                                           {"KVTIER_OVERSUBSCRIBE", "1.5"},
                                           {"KVTIER_STATS", "no"}}));
  ASSERT_TRUE(r.ok()) << r.status().message();
  std::vector<std::string> lines = Lines(Dump(r.value()));
  ASSERT_EQ(lines.size(), OptionTable().size());
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_TRUE(lines[i].starts_with(OptionTable()[i].env + "=")) << lines[i];
  }
  auto has = [&](const std::string& line) {
    return std::find(lines.begin(), lines.end(), line) != lines.end();
  };
  EXPECT_TRUE(has("KVTIER_PAGE_SIZE=4 MiB"));
  EXPECT_TRUE(has("KVTIER_BACKEND=sim"));
  EXPECT_TRUE(has("KVTIER_OVERSUBSCRIBE=1.5"));
  EXPECT_TRUE(has("KVTIER_STATS=0"));
  EXPECT_TRUE(has("KVTIER_SIM_DEVICE_MEMORY=16 GiB  (default)"));
  EXPECT_TRUE(has("KVTIER_DEVICE_BUDGET=0  (default)"));
  EXPECT_TRUE(has("KVTIER_TICK_MS=10  (default)"));
  EXPECT_TRUE(has("KVTIER_SHOW_STATS=0  (default)"));
  EXPECT_TRUE(has("KVTIER_SIM_DEVICE_NAME=kvtier simulated GPU  (default)"));
}

TEST(OptionTable, RowsAreWellFormed) {
  for (const OptionInfo& row : OptionTable()) {
    std::string upper = row.field;
    for (char& c : upper) c = static_cast<char>(toupper(c));
    EXPECT_EQ(row.env, "KVTIER_" + upper);
    EXPECT_NE(std::string(row.accepted), "") << row.env;
    std::string doc = row.doc;
    EXPECT_TRUE(!doc.empty() && doc.back() == '.') << row.env << ": doc must be a sentence";
  }
}

TEST(OptionsMarkdownTable, OneRowPerOptionInTableOrder) {
  std::vector<std::string> lines = Lines(OptionsMarkdownTable());
  ASSERT_EQ(lines.size(), OptionTable().size() + 2);
  EXPECT_EQ(lines[0], "| Variable | Default | Accepted | Description |");
  EXPECT_EQ(lines[1], "|---|---|---|---|");
  for (size_t i = 0; i < OptionTable().size(); ++i) {
    const std::string& line = lines[i + 2];
    EXPECT_TRUE(line.starts_with("| `" + OptionTable()[i].env + "` | ")) << line;
    // Exactly five cell borders: every '|' inside a cell is escaped.
    int borders = 0;
    for (size_t j = 0; j < line.size(); ++j)
      borders += line[j] == '|' && (j == 0 || line[j - 1] != '\\');
    EXPECT_EQ(borders, 5) << line;
    // Outside code spans a bare '<' would start an HTML tag ("<pid>" vanishes).
    bool in_code = false;
    for (size_t j = 0; j < line.size(); ++j) {
      if (line[j] == '`') in_code = !in_code;
      EXPECT_FALSE(line[j] == '<' && !in_code && (j == 0 || line[j - 1] != '\\')) << line;
    }
  }
  EXPECT_NE(OptionsMarkdownTable().find(
                "| `KVTIER_BACKEND` | `auto` | auto\\|cuda\\|sim\\|host\\|off | "),
            std::string::npos);
}

// The README's table is generated (scripts/gen-options-doc); this keeps it from
// drifting when options.def or the policy registry changes.
TEST(OptionsMarkdownTable, ReadmeHasTheGeneratedTable) {
  const std::string path = std::string(KVTIER_SOURCE_DIR) + "/README.md";
  std::ifstream in(path);
  ASSERT_TRUE(in) << path << " is missing; run scripts/gen-options-doc after creating it";
  std::string block;
  int state = 0;  // 0 before the begin marker, 1 inside, 2 after the end marker
  for (std::string line; std::getline(in, line) && state < 2;) {
    if (state == 0 && line.find("<!-- options:begin -->") != std::string::npos) {
      state = 1;
    } else if (state == 1 && line.find("<!-- options:end -->") != std::string::npos) {
      state = 2;
    } else if (state == 1) {
      block += line + "\n";
    }
  }
  ASSERT_EQ(state, 2) << path
                      << " lacks the <!-- options:begin --> and <!-- options:end --> markers";
  // Blank lines around the table are allowed.
  while (block.starts_with("\n")) block.erase(0, 1);
  while (block.ends_with("\n\n")) block.pop_back();
  EXPECT_EQ(block, OptionsMarkdownTable())
      << "README.md's variable table is stale; run scripts/gen-options-doc";
}

TEST(ParseOptions, AHostileValueLeavesTheMessageWhole) {
  Result<Options> r =
      ParseOptions(MapEnv({{"KVTIER_DEVICE_BUDGET", "9" + std::string(600, '\xf5')}}));
  ASSERT_FALSE(r.ok());
  const std::string message = r.status().message();
  EXPECT_EQ(message.rfind("KVTIER_DEVICE_BUDGET=9\\xf5", 0), 0u) << message;
  EXPECT_NE(message.find("(accepted: "), std::string::npos) << message;
  EXPECT_LT(message.size(), 300u) << message;
}

}  // namespace
}  // namespace kvtier
