// kvtier-top as a program: --once and --json against synthetic segments
// (figures, rates from a live publisher, refused and stale segments, usage
// errors), and the interactive screen driven through tmux.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/stats_segment.h"
#include "tests/testing/skip_without.h"
#include "tests/tools/json_lite.h"
#include "tests/tools/synthetic.h"
#include "tests/tools/tool_test_util.h"
#include "tools/stats/stats_fields.h"

namespace kvtier {
namespace {

using namespace std::chrono_literals;
using testing::Json;
using testing::RunResult;
using testing::Synthetic;

constexpr uint64_t kStep = 10;
constexpr char kCommand[] = "stats-test-cmd";

StatsIdentity Identity() {
  StatsIdentity id;
  id.command = kCommand;
  id.backend = "sim";
  id.policy = "lru";
  id.disk_io = "io_uring+direct";
  id.page_size = Synthetic::kPageSize;
  return id;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

class TopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    auto seg = StatsSegment::Create(dir_.path(), Identity());
    ASSERT_TRUE(seg.ok()) << seg.status().message();
    seg_ = std::move(seg).value();
    process_.Step(kStep);
    seg_->AddEvent("disk tier degraded: ENOSPC");
    seg_->Publish(process_.counters(), process_.regions());
  }

  RunResult Top(std::vector<std::string> args, const std::vector<std::string>& env = {}) {
    std::vector<std::string> argv = {KVTIER_TOP_BIN};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.push_back("--dir");
    argv.push_back(dir_.path());
    return testing::Run(argv, 30s, env);
  }

  Json TopJson(std::vector<std::string> args) {
    args.insert(args.begin(), "--json");
    RunResult r = Top(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    Json json;
    std::string error;
    EXPECT_TRUE(testing::ParseJson(r.out, &json, &error)) << error << "\n" << r.out;
    return json;
  }

  // Starts a stats_fake_publisher in our directory; returns its pid.
  pid_t StartPublisher(std::unique_ptr<testing::Child>* child, int interval_ms) {
    *child = std::make_unique<testing::Child>(std::vector<std::string>{
        KVTIER_FAKE_PUBLISHER_BIN, dir_.path(), "--interval-ms", std::to_string(interval_ms)});
    std::string line;
    EXPECT_TRUE((*child)->ReadLine(&line, 10s)) << "the publisher did not start";
    EXPECT_EQ(line.rfind("ready ", 0), 0u) << line;
    return (*child)->pid();
  }

  testing::TempDir dir_;
  std::unique_ptr<StatsSegment> seg_;
  testing::SyntheticProcess process_;
};

TEST_F(TopTest, TheHostBackendIsShownInItsOwnWords) {
  // The same process as the host backend: mapped, staged and SSD, not a
  // device and a host tier.
  seg_.reset();
  StatsIdentity id = Identity();
  id.backend = "host";
  auto seg = StatsSegment::Create(dir_.path(), id);
  ASSERT_TRUE(seg.ok()) << seg.status().message();
  seg_ = std::move(seg).value();
  seg_->Publish(process_.counters(), process_.regions());
  RunResult r = Top({"--once", "-d", "0"}, {"COLUMNS=120"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* label : {"Mapped ", "Staging ", "SSD ", "Unmapped ", "Remapped ",
                            "unmapped at faults", " tiered blocks, ", "MAPPED", "STAGING", "remap ",
                            "mapped_used_bytes=", "staging_used_bytes="}) {
    EXPECT_TRUE(Contains(r.out, label)) << label << "\n" << r.out;
  }
  // Not one word of a GPU, its device or its driver, in any case.
  std::string lower = r.out;
  for (char& c : lower) c = static_cast<char>(tolower(static_cast<unsigned char>(c)));
  for (const char* word : {"gpu", "device", "driver", "promote"}) {
    EXPECT_FALSE(Contains(lower, word)) << word << "\n" << r.out;
  }
}

TEST_F(TopTest, AProcessOnTwoGpusShowsAMeterForEach) {
  constexpr uint64_t kGiB = uint64_t{1} << 30;
  Counters::Set(process_.counters().idle_seals, 2);  // and its CUDA disk tier's gate
  Counters::Set(process_.counters().gate_stalls, 3);
  Counters::Set(process_.counters().gate_stall_ns, 3'000'000);
  seg_->Publish(process_.counters(), process_.regions(),
                {{0, 2 * kGiB, 4 * kGiB}, {1, 1 * kGiB, 4 * kGiB}});
  RunResult r = Top({"--once", "-d", "0"}, {"COLUMNS=120"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Contains(r.out,
                       "SSD gate  2 idle seals   3 GPU submissions waited for spilled "
                       "pages (avg 1"))
      << r.out;
  int header = 0, detail = 0;
  for (const std::string& line : Lines(r.out)) {
    const bool gpu0 = Contains(line, "2.00 GiB / 4.00 GiB");
    const bool gpu1 = Contains(line, "1.00 GiB / 4.00 GiB");
    if (line.rfind("GPU 0", 0) == 0 && gpu0) ++header;
    if (line.rfind("GPU 1", 0) == 0 && gpu1) ++header;
    if (line.rfind(" GPU 0", 0) == 0 && gpu0) ++detail;
    if (line.rfind(" GPU 1", 0) == 0 && gpu1) ++detail;
  }
  EXPECT_EQ(header, 2) << r.out;  // the machine's meters, one per GPU
  EXPECT_EQ(detail, 2) << r.out;  // and the process's, under its Device meter

  Json json = TopJson({"-d", "0"});
  const Json& gpus = json["processes"][0]["gpus"];
  ASSERT_EQ(gpus.size(), 2u) << r.out;
  EXPECT_EQ(gpus[1]["ordinal"].U64(), 1u);
  EXPECT_EQ(gpus[1]["used_bytes"].U64(), 1 * kGiB);
  EXPECT_EQ(gpus[1]["budget_bytes"].U64(), 4 * kGiB);
  EXPECT_EQ(json["totals"]["gpus"].size(), 2u);
  EXPECT_EQ(json["totals"]["gpus"][0]["used_bytes"].U64(), 2 * kGiB);
}

TEST_F(TopTest, OnceShowsTheTableAndEveryProcessInDetail) {
  RunResult r = Top({"--once", "-d", "0"}, {"COLUMNS=120"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string& out = r.out;
  const std::string pid = std::to_string(getpid());
  EXPECT_TRUE(Contains(out, "processes 1")) << out;
  EXPECT_TRUE(Contains(out, "no rates (-d 0)")) << out;
  // Header meters, machine totals.
  EXPECT_TRUE(Contains(out, "3.00 GiB / 8.00 GiB")) << out;
  EXPECT_TRUE(Contains(out, "1.50 GiB / 32.0 GiB")) << out;
  EXPECT_TRUE(Contains(out, "512 MiB / 64.0 GiB")) << out;
  EXPECT_TRUE(Contains(out, "errors 2")) << out;  // spill errors: 10 / 4
  // The process row: pid, command, backend, policy, tier cells, no rates yet.
  bool row = false;
  for (const std::string& line : Lines(out)) {
    if (line.rfind(std::string(7 - pid.size(), ' ') + pid + " " + kCommand, 0) == 0) {
      row = true;
      EXPECT_TRUE(Contains(line, " sim  lru ")) << line;
      EXPECT_TRUE(Contains(line, "3.0G/8.0G")) << line;
      EXPECT_TRUE(Contains(line, "512M/64G")) << line;
      EXPECT_TRUE(Contains(line, "    -     -     -     -     -    2")) << line;
    }
  }
  EXPECT_TRUE(row) << out;
  // Detail: moves, faults, errors, regions with heat and tiers, events, fields.
  EXPECT_TRUE(Contains(out, "Process   " + pid + " " + kCommand)) << out;
  EXPECT_TRUE(Contains(out, "disk io io_uring+direct")) << out;
  EXPECT_TRUE(Contains(out, "Demoted      640 MiB in       320 pages")) << out;
  EXPECT_TRUE(Contains(out, "Promoted     320 MiB in       160 pages")) << out;
  EXPECT_TRUE(Contains(out, "Faults    100 (200 MiB, avg wait 160 us)")) << out;
  EXPECT_TRUE(Contains(out, "spill 2   restore 0")) << out;
  EXPECT_TRUE(Contains(out, "   1   256M    48    48    16    16 [")) << out;
  EXPECT_TRUE(Contains(out, "] alloc#3 libchat.so")) << out;
  EXPECT_TRUE(Contains(out, "[DDDDDDDDDDDDHHHHHHHHHHHHSSSS....]")) << out;
  EXPECT_TRUE(Contains(out, "[HHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHH]")) << out;
  // Region 2's heat rises with the page index: the strip runs cold to hot.
  EXPECT_TRUE(Contains(out, "[    ....::::--------============] alloc#4")) << out;
  EXPECT_TRUE(Contains(out, "disk tier degraded: ENOSPC")) << out;
  for (const stats::FieldInfo& f : stats::Fields()) {
    EXPECT_TRUE(Contains(out, std::string(f.name) + "=")) << f.name;
  }
  EXPECT_TRUE(Contains(out, "demoted_bytes=" + std::to_string(kStep * Synthetic::kDemotedBytes)))
      << out;
}

TEST_F(TopTest, OnceFitsEightyColumns) {
  RunResult r = Top({"--once", "-d", "0"}, {"COLUMNS=80"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<std::string> lines = Lines(r.out);
  ASSERT_GT(lines.size(), 10u);
  // The header, the table and the detail figures fit; only free text (the
  // directory in the title, region tags) may run past and is cut on screen.
  for (const std::string& line : lines) {
    if (Contains(line, "alloc#") || line.rfind("kvtier-top ", 0) == 0) continue;
    EXPECT_LE(line.size(), 80u) << line;
  }
  EXPECT_TRUE(Contains(
      r.out, "    PID COMMAND    BKND POLICY  DEV HOST DISK PROMO DEMOT SPILL RESTR FLT/s  ERR"))
      << r.out;
  EXPECT_TRUE(Contains(r.out, "  37%   4%   0%")) << r.out;
}

TEST_F(TopTest, JsonHasEveryFieldWithItsValue) {
  Json json = TopJson({"-d", "0"});
  ASSERT_EQ(json.type, Json::Type::kObject);
  EXPECT_EQ(json["dir"].text, dir_.path());
  EXPECT_TRUE(json["rate_interval_s"].IsNull());
  ASSERT_EQ(json["processes"].size(), 1u);
  const Json& p = json["processes"][0];
  EXPECT_EQ(p["pid"].U64(), static_cast<uint64_t>(getpid()));
  EXPECT_EQ(p["command"].text, kCommand);
  EXPECT_EQ(p["backend"].text, "sim");
  EXPECT_EQ(p["policy"].text, "lru");
  EXPECT_EQ(p["disk_io"].text, "io_uring+direct");
  EXPECT_EQ(p["page_size"].U64(), Synthetic::kPageSize);
  EXPECT_EQ(p["publishes"].U64(), 2u);  // the empty first one, then ours
  kvtier_stats_segment expected{};
#define KVTIER_STAT(name, kind, doc) expected.name = Counters::Get(process_.counters().name);
#include "kvtier/stats_fields.def"
#undef KVTIER_STAT
  for (const stats::FieldInfo& f : stats::Fields()) {
    ASSERT_TRUE(p.Has(f.name)) << f.name;
    EXPECT_EQ(p[f.name].U64(), f.get(expected)) << f.name;
  }
  EXPECT_EQ(p["errors"].U64(), kStep / Synthetic::kSpillErrorEvery);
  EXPECT_TRUE(p["rates"].IsNull());
  ASSERT_EQ(p["region_rows"].size(), 3u);
  const Json& r1 = p["region_rows"][0];
  EXPECT_EQ(r1["id"].U64(), 1u);
  EXPECT_EQ(r1["size"].U64(), 128 * Synthetic::kPageSize);
  EXPECT_EQ(r1["pages_device"].U64(), 48u);
  EXPECT_EQ(r1["pages_host"].U64(), 48u);
  EXPECT_EQ(r1["pages_disk"].U64(), 16u);
  EXPECT_EQ(r1["pages_untouched"].U64(), 16u);
  EXPECT_EQ(r1["tag"].text, "alloc#3 libchat.so");
  ASSERT_EQ(r1["heat"].size(), size_t{KVTIER_STATS_HEAT_BUCKETS});
  ASSERT_EQ(r1["tier"].size(), size_t{KVTIER_STATS_HEAT_BUCKETS});
  EXPECT_EQ(r1["tier"][0].U64(), 0u);
  EXPECT_EQ(r1["tier"][31].U64(), 3u);
  ASSERT_EQ(p["events"].size(), 1u);
  EXPECT_EQ(p["events"][0]["text"].text, "disk tier degraded: ENOSPC");
  const Json& totals = json["totals"];
  EXPECT_EQ(totals["processes"].U64(), 1u);
  EXPECT_EQ(totals["device_used_bytes"].U64(), Synthetic::kDeviceUsed);
  EXPECT_EQ(totals["device_budget_bytes"].U64(), Synthetic::kDeviceBudget);
  EXPECT_EQ(json["problems"].size(), 0u);
}

TEST_F(TopTest, RatesComeFromCounterDeltasOfALivePublisher) {
  std::unique_ptr<testing::Child> publisher;
  const pid_t pid = StartPublisher(&publisher, 20);
  Json json = TopJson({"-d", "0.3", "--pid", std::to_string(pid)});
  EXPECT_NEAR(json["rate_interval_s"].Number(), 0.3, 1e-9);
  ASSERT_EQ(json["processes"].size(), 1u);
  const Json& rates = json["processes"][0]["rates"];
  ASSERT_FALSE(rates.IsNull());
  // The publisher adds fixed amounts per step, so whatever the timing, the
  // rates keep the ratios of the per-step amounts.
  const double promote = rates["promote_bytes_per_s"].Number();
  ASSERT_GT(promote, 0);
  EXPECT_GT(rates["interval_s"].Number(), 0.1);
  const double per_byte = promote / Synthetic::kPromotedBytes;
  EXPECT_NEAR(rates["demote_bytes_per_s"].Number(), per_byte * Synthetic::kDemotedBytes,
              promote * 1e-6);
  EXPECT_NEAR(rates["spill_bytes_per_s"].Number(), per_byte * Synthetic::kSpilledBytes,
              promote * 1e-6);
  EXPECT_NEAR(rates["restore_bytes_per_s"].Number(), per_byte * Synthetic::kRestoredBytes,
              promote * 1e-6);
  EXPECT_NEAR(rates["faults_per_s"].Number(), per_byte * Synthetic::kFaults, 1e-3);
  // Steps every 20 ms: about 50 a second; allow a loaded machine.
  const double steps_per_s = per_byte;
  EXPECT_GT(steps_per_s, 5);
  EXPECT_LT(steps_per_s, 60);

  // The publisher removes its segment when it stops.
  const std::string path = dir_.path() + "/kvtier." + std::to_string(pid);
  EXPECT_TRUE(testing::FileExists(path));
  EXPECT_EQ(publisher->Stop(SIGTERM, 10s), 0);
  EXPECT_FALSE(testing::FileExists(path));
}

TEST_F(TopTest, TwoProcessesAddUpInTheTotals) {
  std::unique_ptr<testing::Child> publisher;
  const pid_t pid = StartPublisher(&publisher, 50);
  Json json = TopJson({"-d", "0"});
  ASSERT_EQ(json["processes"].size(), 2u);
  EXPECT_LT(json["processes"][0]["pid"].U64(), json["processes"][1]["pid"].U64());
  EXPECT_EQ(json["totals"]["device_used_bytes"].U64(), 2 * Synthetic::kDeviceUsed);
  EXPECT_EQ(json["totals"]["disk_budget_bytes"].U64(), 2 * Synthetic::kDiskBudget);
  RunResult r = Top({"--once", "-d", "0"});
  EXPECT_TRUE(Contains(r.out, "processes 2")) << r.out;
  EXPECT_TRUE(Contains(r.out, "6.00 GiB / 16.0 GiB")) << r.out;
  EXPECT_TRUE(Contains(r.out, std::to_string(pid) + " fake-engine")) << r.out;
}

TEST_F(TopTest, RefusesOtherLayoutsAndCleansSegmentsOfDeadProcesses) {
  // A segment of another layout version, for a live process (our parent).
  kvtier_stats_segment other{};
  other.magic = KVTIER_STATS_MAGIC;
  other.version = KVTIER_STATS_VERSION + 1;
  other.size = sizeof other;
  const std::string refused = dir_.path() + "/kvtier." + std::to_string(getppid());
  ASSERT_TRUE(testing::WriteFile(refused, &other, sizeof other));
  // A segment left by a process that died.
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto seg = StatsSegment::Create(dir_.path(), Identity());
    _exit(seg.ok() ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  const std::string stale = dir_.path() + "/kvtier." + std::to_string(child);
  ASSERT_TRUE(testing::FileExists(stale));

  RunResult r = Top({"--once", "-d", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "processes 1")) << r.out;
  EXPECT_TRUE(Contains(
      r.out, "! " + refused + ": stats layout version " + std::to_string(KVTIER_STATS_VERSION + 1) +
                 ", but this tool reads version " + std::to_string(KVTIER_STATS_VERSION)))
      << r.out;
  EXPECT_TRUE(Contains(r.out, "- " + stale + ": its process is gone; removed the stale segment"))
      << r.out;
  EXPECT_FALSE(testing::FileExists(stale));
  EXPECT_TRUE(testing::FileExists(refused));  // its process lives: not ours to remove

  Json json = TopJson({"-d", "0"});
  ASSERT_EQ(json["problems"].size(), 1u);
  EXPECT_EQ(json["problems"][0]["state"].text, "refused");
  EXPECT_EQ(json["problems"][0]["pid"].U64(), static_cast<uint64_t>(getppid()));
}

TEST_F(TopTest, PidSelectsOneProcess) {
  RunResult r = Top({"--once", "-d", "0", "--pid", std::to_string(getpid())});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "processes 1")) << r.out;
  r = Top({"--once", "-d", "0", "--pid", std::to_string(getppid())});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(Contains(r.err, "no kvtier process " + std::to_string(getppid()))) << r.err;
}

TEST_F(TopTest, UsageErrorsSayWhatIsWrong) {
  RunResult r = Top({"-d", "abc"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(Contains(r.err, "-d abc: not a number of seconds")) << r.err;
  r = Top({"--once", "--json"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(Contains(r.err, "choose one")) << r.err;
  r = Top({"--bogus"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(Contains(r.err, "unknown option --bogus")) << r.err;
  r = Top({"-n", "0"});
  EXPECT_EQ(r.exit_code, 2);
  r = testing::Run({KVTIER_TOP_BIN, "--once", "--dir", "/nonexistent-kvtier-dir"}, 30s);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(Contains(r.err, "/nonexistent-kvtier-dir: cannot open the stats directory")) << r.err;
  // Interactive without a terminal.
  r = Top({"-n", "1"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(Contains(r.err, "needs a terminal; use --once or --json")) << r.err;
}

std::string FindInPath(const std::string& program) {
  const char* path = getenv("PATH");
  std::istringstream dirs(path != nullptr ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string candidate = dir + "/" + program;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

// A private tmux server (its own socket), killed at the end of the test.
class Tmux {
 public:
  // A socket name never used before in this process: a server being killed
  // must not take the next one's commands.
  explicit Tmux(std::string binary)
      : binary_(std::move(binary)),
        socket_("kvtier-top-test-" + std::to_string(getpid()) + "-" +
                std::to_string(++instances_)) {}
  ~Tmux() { Run({"kill-server"}); }
  RunResult Run(std::vector<std::string> args) {
    std::vector<std::string> argv = {binary_, "-L", socket_, "-f", "/dev/null"};
    argv.insert(argv.end(), args.begin(), args.end());
    return testing::Run(argv, 10s, {"TERM=xterm-256color"});
  }
  std::string Capture() { return Run({"capture-pane", "-p", "-t", "top"}).out; }
  // Polls the screen until it contains every one of `texts` (a capture may
  // catch a screen half painted); returns the last capture.
  bool WaitFor(const std::vector<std::string>& texts, std::string* screen) {
    return testing::PollUntil(
        [&] {
          *screen = Capture();
          for (const std::string& t : texts) {
            if (!Contains(*screen, t)) return false;
          }
          return true;
        },
        10s);
  }

 private:
  static inline int instances_ = 0;
  std::string binary_;
  std::string socket_;
};

TEST_F(TopTest, InteractiveScreenFollowsTheKeys) {
  const std::string tmux_bin = FindInPath("tmux");
  if (tmux_bin.empty()) KVTIER_SKIP_WITHOUT("tmux is not installed (scripts/setup-deps)");
  std::unique_ptr<testing::Child> publisher;
  const pid_t other = StartPublisher(&publisher, 100);
  // Sorted by pid, Down selects the second row.
  const pid_t second = std::max(other, getpid());
  const std::string second_row =
      std::to_string(second) + " " + (second == other ? "fake-engine" : kCommand);
  Tmux tmux(tmux_bin);
  const std::string command = std::string(KVTIER_TOP_BIN) + " -d 0.2 --dir " + dir_.path();
  // exit-empty off: the server outlives the session that q ends, so the
  // next new-session does not race its shutdown.
  RunResult r = tmux.Run({"start-server", ";", "set-option", "-s", "exit-empty", "off", ";",
                          "new-session", "-d", "-x", "100", "-y", "30", "-s", "top", command});
  ASSERT_EQ(r.exit_code, 0) << r.err;

  std::string screen;
  // At 100 columns the command column may cut a name; 10 characters stay.
  EXPECT_TRUE(tmux.WaitFor({std::to_string(other) + " fake-engine",
                            std::to_string(getpid()) + " " + std::string(kCommand).substr(0, 10),
                            "processes 2", "sort PID", "Enter details"},
                           &screen))
      << screen;

  // Down selects the second process; Enter opens its detail view.
  tmux.Run({"send-keys", "-t", "top", "Down"});
  tmux.Run({"send-keys", "-t", "top", "Enter"});
  EXPECT_TRUE(
      tmux.WaitFor({"Process   " + second_row, "alloc#3 libchat.so", "Enter back"}, &screen))
      << screen;

  // Enter goes back to the list; s sorts by the next column.
  tmux.Run({"send-keys", "-t", "top", "Enter"});
  EXPECT_TRUE(tmux.WaitFor({"Enter details"}, &screen)) << screen;
  tmux.Run({"send-keys", "-t", "top", "s"});
  EXPECT_TRUE(tmux.WaitFor({"sort DEVICE"}, &screen)) << screen;

  // q quits: the session ends with the program.
  tmux.Run({"send-keys", "-t", "top", "q"});
  EXPECT_TRUE(testing::PollUntil(
      [&] {
        return tmux.Run({"has-session", "-t", "top"}).exit_code != 0;
      },
      10s))
      << tmux.Capture();

  // -n 3: three refreshes, then it exits by itself; the shell after it
  // prints its exit status on the main screen.
  r = tmux.Run({"new-session", "-d", "-x", "80", "-y", "24", "-s", "top",
                "'" + std::string(KVTIER_TOP_BIN) + "' -n 3 -d 0.1 --dir '" + dir_.path() +
                    "'; echo kvtier-top exited $?; sleep 60"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(tmux.WaitFor({"kvtier-top exited 0"}, &screen)) << screen;
}

}  // namespace
}  // namespace kvtier
