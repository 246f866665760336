// kvtier-top: live monitor of every kvtier process on this machine.
//
//   kvtier-top [-d SECONDS] [-n N] [--pid PID] [--dir DIR]   interactive
//   kvtier-top --once [-d SECONDS] [--pid PID] [--dir DIR]   text snapshot
//   kvtier-top --json [-d SECONDS] [--pid PID] [--dir DIR]   JSON snapshot
//
// A snapshot samples twice, SECONDS apart (default 0.5), to compute rates;
// -d 0 samples once and leaves rates out. Exit status: 0 ok, 1 runtime
// problem (no such directory, --pid not found), 2 usage error.
// Thread-safety: single-threaded program.
#include <sys/ioctl.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "tools/stats/stats_reader.h"
#include "tools/top/collector.h"
#include "tools/top/curses_view.h"
#include "tools/top/json_output.h"
#include "tools/top/layout.h"

namespace {

using namespace kvtier;

constexpr const char* kUsage =
    "usage: kvtier-top [options]\n"
    "  -d, --delay SECONDS  refresh every SECONDS (tenths allowed; default 1.0); with --once or\n"
    "                       --json the interval rates are measured over (default 0.5, 0 = no "
    "rates)\n"
    "  -n, --iterations N   exit after N refreshes\n"
    "      --once           print one plain-text snapshot (everything the screen shows) and exit\n"
    "      --json           print one JSON snapshot and exit\n"
    "  -p, --pid PID        only this process (interactive: open its detail view)\n"
    "      --dir DIR        where kvtier processes publish statistics (default /dev/shm)\n"
    "  -h, --help           this text\n"
    "keys: Up/Down select or scroll, Enter details/back, s next sort column, q quit\n";

struct Args {
  double delay_s = -1;  // unset
  int iterations = 0;
  bool once = false;
  bool json = false;
  int32_t pid = 0;
  std::string dir = stats::kDefaultDir;
};

[[noreturn]] void UsageError(const std::string& message) {
  fprintf(stderr, "kvtier-top: %s\n%s", message.c_str(), kUsage);
  exit(2);
}

bool ParseDouble(const char* s, double* out) {
  char* end = nullptr;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || *end != '\0' || errno != 0 || !std::isfinite(v)) return false;
  *out = v;
  return true;
}

bool ParseInt(const char* s, long max, long* out) {
  char* end = nullptr;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (end == s || *end != '\0' || errno != 0 || v < 0 || v > max) return false;
  *out = v;
  return true;
}

Args ParseArgs(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
    bool has_inline = false;
    if (arg.rfind("--", 0) == 0 && arg.find('=') != std::string::npos) {
      value = arg.substr(arg.find('=') + 1);
      arg = arg.substr(0, arg.find('='));
      has_inline = true;
    }
    auto need = [&](const char* what) -> std::string {
      if (has_inline) return value;
      if (i + 1 >= argc) UsageError(arg + " needs " + what);
      return argv[++i];
    };
    if (arg == "-h" || arg == "--help") {
      fputs(kUsage, stdout);
      exit(0);
    } else if (arg == "-d" || arg == "--delay") {
      const std::string v = need("a number of seconds");
      if (!ParseDouble(v.c_str(), &a.delay_s) || a.delay_s < 0 || a.delay_s > 3600) {
        UsageError("-d " + v + ": not a number of seconds from 0 to 3600 (e.g. 1.5)");
      }
    } else if (arg == "-n" || arg == "--iterations") {
      const std::string v = need("a count");
      long n;
      if (!ParseInt(v.c_str(), 1000000000, &n) || n == 0)
        UsageError("-n " + v + ": not a positive count");
      a.iterations = static_cast<int>(n);
    } else if (arg == "--once") {
      a.once = true;
    } else if (arg == "--json") {
      a.json = true;
    } else if (arg == "-p" || arg == "--pid") {
      const std::string v = need("a process id");
      long pid;
      if (!ParseInt(v.c_str(), INT32_MAX, &pid) || pid == 0)
        UsageError("--pid " + v + ": not a process id");
      a.pid = static_cast<int32_t>(pid);
    } else if (arg == "--dir") {
      a.dir = need("a directory");
      if (a.dir.empty()) UsageError("--dir needs a directory");
    } else {
      UsageError("unknown option " + arg);
    }
  }
  if (a.once && a.json) UsageError("--once and --json exclude each other; choose one");
  if (!a.once && !a.json && a.delay_s >= 0 && a.delay_s < 0.1) {
    UsageError("-d " + std::to_string(a.delay_s) + ": the refresh needs at least 0.1 seconds");
  }
  return a;
}

// Width of the text snapshot: $COLUMNS, else the terminal's, else 120.
int TextWidth() {
  if (const char* c = getenv("COLUMNS")) {
    const int w = atoi(c);
    if (w >= 40 && w <= 1000) return w;
  }
  winsize ws;
  if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 40)
    return ws.ws_col;
  return 120;
}

int Snapshot(top::Collector& collector, const Args& args) {
  const double interval = args.delay_s >= 0 ? args.delay_s : 0.5;
  top::Model model = collector.Collect();
  if (interval > 0) {
    // A tool waiting between its two samples, not a test hiding a race.
    std::this_thread::sleep_for(std::chrono::duration<double>(interval));
    model = collector.Collect();
  }
  if (args.json) {
    fputs(top::RenderJson(model, interval).c_str(), stdout);
  } else {
    top::ViewOptions vo;
    vo.width = TextWidth();
    vo.delay_s = interval;
    vo.snapshot = true;
    vo.all_problems = true;
    vo.tier_letters = true;
    fputs(top::RenderText(model, vo).c_str(), stdout);
  }
  fflush(stdout);
  if (args.pid > 0 && model.processes.empty()) {
    fprintf(stderr, "kvtier-top: no kvtier process %d publishes statistics in %s\n", args.pid,
            args.dir.c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = ParseArgs(argc, argv);
  std::string error;
  std::unique_ptr<stats::SegmentDir> dir = stats::SegmentDir::Open(args.dir, &error);
  if (dir == nullptr) {
    fprintf(stderr, "kvtier-top: %s\n", error.c_str());
    return 1;
  }
  top::Collector collector(*dir, args.pid);
  if (args.once || args.json) return Snapshot(collector, args);

  top::CursesOptions options;
  options.delay_s = args.delay_s >= 0 ? args.delay_s : 1.0;
  options.iterations = args.iterations;
  options.detail_pid = args.pid;
  const int code = top::RunCurses(collector, options, &error);
  if (!error.empty()) fprintf(stderr, "kvtier-top: %s\n", error.c_str());
  return code;
}
