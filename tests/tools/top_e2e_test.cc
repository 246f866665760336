// End to end: the demo engine (examples/chat_engine) runs on the simulated
// GPU under LD_PRELOAD=libkvtier.so, publishing its statistics in a temporary
// directory, and holds (--hold) once its work is done. kvtier-top --json and
// --once and kvtier-exporter --once read it there; their figures must equal
// the statistics the runtime writes when the engine exits (KVTIER_STATS_FILE,
// one JSON object; the KVTIER_SHOW_STATS summary is for people, and is only
// checked to be printed).
//
// Why the figures can be compared exactly: while held, the engine thread
// sleeps and touches no memory, so no fault, allocation or free happens. The
// policy thread still ticks (every 10 ms, publishing every >= 50 ms): it
// drains the signals of the last steps (refaults are counted then) and
// demotes while the device is above its high watermark. With the lru policy
// (set here explicitly) a tick that finds no signal and moves nothing leaves
// every input of the next tick unchanged (page tiers, last accesses, device
// use, hint flags), so nothing moves any more: the counters are at a fixed
// point. The test waits until two snapshots at least one publish (so at
// least one tick) apart agree, and compares that state. At exit the engine
// frees its memory; that changes the gauges of live memory (regions, device
// and plain bytes in use: not compared) but none of the counters compared,
// nor the device peak and budget.
// Thread-safety: single-threaded test.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "tests/tools/exposition_parser.h"
#include "tests/tools/json_lite.h"
#include "tests/tools/logged_process.h"
#include "tests/tools/tool_test_util.h"

namespace kvtier {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// Generous: sanitizer builds run the engine several times slower.
constexpr milliseconds kEngineTimeout = seconds(120);
constexpr milliseconds kToolTimeout = seconds(30);
constexpr milliseconds kSettleTimeout = seconds(20);

// The figures compared, as one snapshot shows them.
struct Figures {
  uint64_t allocations = 0;
  uint64_t matched_allocations = 0;
  uint64_t faults = 0;
  uint64_t refaults = 0;
  uint64_t demoted_pages = 0;
  uint64_t promoted_pages = 0;
  uint64_t driver_evictions = 0;
  uint64_t device_peak_bytes = 0;
  uint64_t device_budget_bytes = 0;
  bool operator==(const Figures&) const = default;
};

Figures FiguresOf(const testing::Json& p) {
  Figures f;
  f.allocations = p["allocations"].U64();
  f.matched_allocations = p["matched_allocations"].U64();
  f.faults = p["faults"].U64();
  f.refaults = p["refaults"].U64();
  f.demoted_pages = p["demoted_pages"].U64();
  f.promoted_pages = p["promoted_pages"].U64();
  f.driver_evictions = p["driver_evictions"].U64();
  f.device_peak_bytes = p["device_peak_bytes"].U64();
  f.device_budget_bytes = p["device_budget_bytes"].U64();
  return f;
}

std::vector<std::string> Split(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string word; in >> word;) out.push_back(word);
  return out;
}

class TopE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty()) << "cannot create a temporary directory";
    stats_dir_ = dir_.path();
  }

  // Starts the engine under the preload; it publishes in stats_dir_ and
  // holds until `release` exists.
  std::unique_ptr<testing::LoggedProcess> StartEngine(const std::string& release) {
    std::vector<std::string> env = {
        std::string("LD_PRELOAD=") + KVTIER_PRELOAD,
        "KVTIER_BACKEND=sim",
        "KVTIER_POLICY=lru",
        "KVTIER_DEVICE_BUDGET=16M",
        "KVTIER_PAGE_SIZE=64K",
        "KVTIER_MATCH=size>=16M",  // the KV layers below, not the weights
        "KVTIER_SHOW_STATS=1",
        "KVTIER_STATS_DIR=" + stats_dir_,
        "KVTIER_STATS_FILE=" + final_stats(),
    };
    for (const std::string& e : Split(KVTIER_PRELOAD_ENV)) env.push_back(e);
    // 64 MiB of KV (four 16 MiB layers) for a 16 MiB device budget:
    // faults, demotions and driver evictions all happen within a second.
    return std::make_unique<testing::LoggedProcess>(
        std::vector<std::string>{CHAT_ENGINE_BIN, "--layers", "4", "--kv-bytes", "64M",
                                 "--block-kib", "64", "--sessions", "16", "--max-active", "2",
                                 "--weights", "1", "--weight-mib", "1", "--hold", release},
        env, dir_.path() + "/engine");
  }

  // Where the engine writes its statistics at exit (not a segment's name:
  // the tools never read it).
  std::string final_stats() const { return dir_.path() + "/final-stats.json"; }

  // Runs a tool to the end. COLUMNS is set because the text layout
  // follows it (a narrow one shortens the command column).
  testing::RunResult RunTool(const std::vector<std::string>& argv) {
    testing::LoggedProcess tool(argv, {"COLUMNS=120"},
                                dir_.path() + "/tool" + std::to_string(++tool_runs_));
    testing::RunResult r;
    r.exit_code = tool.Wait(kToolTimeout);
    r.out = tool.Stdout();
    r.err = tool.Stderr();
    return r;
  }

  // kvtier-top --json -d 0 for `pid`: the process's object.
  testing::Json TopJson(pid_t pid) {
    testing::RunResult r = RunTool(
        {KVTIER_TOP_BIN, "--json", "-d", "0", "--dir", stats_dir_, "--pid", std::to_string(pid)});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    testing::Json doc;
    std::string error;
    EXPECT_TRUE(testing::ParseJson(r.out, &doc, &error)) << error << "\n" << r.out;
    EXPECT_EQ(doc["processes"].size(), 1u) << r.out;
    return doc["processes"][0];
  }

  testing::TempDir dir_;
  std::string stats_dir_;
  int tool_runs_ = 0;
};

TEST_F(TopE2eTest, ToolsAgreeWithTheEnginesOwnStatistics) {
  const std::string release = dir_.path() + "/release";
  auto engine = StartEngine(release);
  ASSERT_TRUE(engine->started()) << "cannot start " << CHAT_ENGINE_BIN;
  ASSERT_TRUE(engine->WaitForOutput("chat_engine: holding until " + release, kEngineTimeout))
      << "stdout:\n"
      << engine->Stdout() << "stderr:\n"
      << engine->Stderr();
  const pid_t pid = engine->pid();
  const std::string segment = stats_dir_ + "/kvtier." + std::to_string(pid);
  ASSERT_TRUE(testing::FileExists(segment)) << segment;

  // Settle: two snapshots at least one publish apart that agree.
  testing::Json held = TopJson(pid);
  ASSERT_FALSE(::testing::Test::HasFailure());
  bool settled = testing::PollUntil(
      [&] {
        testing::Json next = TopJson(pid);
        if (next["publishes"].U64() <= held["publishes"].U64()) return false;
        const bool same = FiguresOf(next) == FiguresOf(held);
        held = next;
        return same;
      },
      kSettleTimeout);
  ASSERT_TRUE(settled) << "the counters kept changing while the engine was held";
  const Figures seen = FiguresOf(held);
  EXPECT_EQ(held["command"].text, "chat_engine");
  EXPECT_EQ(held["backend"].text, "sim");
  EXPECT_EQ(held["policy"].text, "lru");
  // The comparison below means something only if kvtier really tiered.
  EXPECT_GT(seen.faults, 0u);
  EXPECT_GT(seen.demoted_pages, 0u);
  EXPECT_EQ(seen.matched_allocations, 4u) << "one region per layer";

  // The text snapshot lists it (pid, command, backend, policy) and shows the
  // same fault count in its detail view.
  testing::RunResult once = RunTool({KVTIER_TOP_BIN, "--once", "-d", "0", "--dir", stats_dir_});
  ASSERT_EQ(once.exit_code, 0) << once.err;
  bool listed = false, faults_shown = false;
  std::istringstream text(once.out);
  for (std::string line; std::getline(text, line);) {
    const std::vector<std::string> w = Split(line);
    if (w.size() >= 4 && w[0] == std::to_string(pid) && w[1] == "chat_engine" && w[2] == "sim" &&
        w[3] == "lru") {
      listed = true;
    }
    if (w.size() >= 3 && w[0] == "Faults" && w[1] == std::to_string(seen.faults) && w[2][0] == '(')
      faults_shown = true;
  }
  EXPECT_TRUE(listed) << "no row \"" << pid << " chat_engine sim lru\":\n" << once.out;
  EXPECT_TRUE(faults_shown) << "no line \"Faults " << seen.faults << " (\":\n" << once.out;

  // The exporter: every line valid, and the same counters.
  testing::RunResult metrics = RunTool({KVTIER_EXPORTER_BIN, "--once", "--dir", stats_dir_});
  ASSERT_EQ(metrics.exit_code, 0) << metrics.err;
  testing::Exposition expo;
  std::string error;
  ASSERT_TRUE(testing::ParseExposition(metrics.out, &expo, &error)) << error;
  EXPECT_EQ(expo.Value("kvtier_faults_total", pid), static_cast<double>(seen.faults));
  EXPECT_EQ(expo.Value("kvtier_demoted_pages_total", pid), static_cast<double>(seen.demoted_pages));
  EXPECT_EQ(expo.Value("kvtier_driver_evictions_total", pid),
            static_cast<double>(seen.driver_evictions));

  // Release the engine; it frees its memory, and the runtime prints its
  // summary and removes the segment at exit.
  ASSERT_TRUE(testing::WriteFile(release, "", 0));
  ASSERT_EQ(engine->Wait(kEngineTimeout), 0) << engine->Stderr();
  EXPECT_NE(engine->Stdout().find("chat_engine: OK"), std::string::npos) << engine->Stdout();
  EXPECT_FALSE(testing::FileExists(segment)) << segment << " outlived its process";

  const std::string err = engine->Stderr();
  EXPECT_NE(err.find("kvtier summary (pid " + std::to_string(pid)), std::string::npos) << err;
  std::string written;
  ASSERT_TRUE(testing::ReadFile(final_stats(), &written)) << "no " << final_stats() << "\n" << err;
  testing::Json final_stats_json;
  ASSERT_TRUE(testing::ParseJson(written, &final_stats_json, &error)) << error << "\n" << written;
  EXPECT_EQ(final_stats_json["pid"].U64(), static_cast<uint64_t>(pid));
  EXPECT_EQ(final_stats_json["backend"].text, "sim");
  EXPECT_EQ(final_stats_json["policy"].text, "lru");
  const Figures at_exit = FiguresOf(final_stats_json["counters"]);
  EXPECT_EQ(at_exit.matched_allocations, seen.matched_allocations);
  EXPECT_EQ(at_exit.allocations, seen.allocations);
  EXPECT_EQ(at_exit.faults, seen.faults);
  EXPECT_EQ(at_exit.refaults, seen.refaults);
  EXPECT_EQ(at_exit.demoted_pages, seen.demoted_pages);
  EXPECT_EQ(at_exit.promoted_pages, seen.promoted_pages);
  EXPECT_EQ(at_exit.driver_evictions, seen.driver_evictions);
  EXPECT_EQ(at_exit.device_peak_bytes, seen.device_peak_bytes);
  EXPECT_EQ(at_exit.device_budget_bytes, seen.device_budget_bytes);
  EXPECT_EQ(seen.device_budget_bytes, 16u << 20);
  EXPECT_LE(seen.device_peak_bytes, seen.device_budget_bytes);
}

}  // namespace
}  // namespace kvtier
