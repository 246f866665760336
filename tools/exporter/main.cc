// kvtier-exporter: serves the statistics of every kvtier process on this
// machine as Prometheus metrics.
//
//   kvtier-exporter [--listen HOST:PORT] [--dir DIR] [--once]
//
// GET /metrics answers the text exposition (exposition.h), read fresh from
// the stats segments on every scrape. The default address is loopback
// (127.0.0.1:9464): the statistics name programs, so exposing them further is
// a choice to make on purpose. Port 0 picks a free port; the first line of
// stdout always says where it listens. --once prints the exposition and
// exits. SIGINT/SIGTERM stop it cleanly. Exit status: 0 ok, 1 runtime
// problem, 2 usage error.
// Thread-safety: single-threaded program.
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "tools/exporter/exposition.h"
#include "tools/exporter/http_server.h"
#include "tools/stats/stats_reader.h"

namespace {

using namespace kvtier;

constexpr const char* kUsage =
    "usage: kvtier-exporter [--listen HOST:PORT] [--dir DIR] [--once]\n"
    "  --listen HOST:PORT  where to serve /metrics (default 127.0.0.1:9464; port 0 picks one)\n"
    "  --dir DIR           where kvtier processes publish statistics (default /dev/shm)\n"
    "  --once              print the metrics to stdout and exit\n";

volatile sig_atomic_t g_stop = 0;
void OnStopSignal(int) { g_stop = 1; }

[[noreturn]] void UsageError(const std::string& message) {
  fprintf(stderr, "kvtier-exporter: %s\n%s", message.c_str(), kUsage);
  exit(2);
}

constexpr const char* kIndex =
    "<html><head><title>kvtier exporter</title></head><body><h1>kvtier exporter</h1>"
    "<p><a href=\"/metrics\">/metrics</a></p></body></html>\n";

}  // namespace

int main(int argc, char** argv) {
  std::string listen = "127.0.0.1:9464";
  std::string dir_path = stats::kDefaultDir;
  bool once = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
    const size_t eq = arg.find('=');
    const bool inline_value = arg.rfind("--", 0) == 0 && eq != std::string::npos;
    if (inline_value) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    }
    auto need = [&]() -> std::string {
      if (inline_value) return value;
      if (i + 1 >= argc) UsageError(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--listen") {
      listen = need();
    } else if (arg == "--dir") {
      dir_path = need();
    } else if (arg == "--once") {
      once = true;
    } else if (arg == "-h" || arg == "--help") {
      fputs(kUsage, stdout);
      return 0;
    } else {
      UsageError("unknown option " + arg);
    }
  }
  exporter::ListenAddress address;
  std::string error;
  if (!once && !exporter::ParseListenAddress(listen, &address, &error)) UsageError(error);

  std::unique_ptr<stats::SegmentDir> dir = stats::SegmentDir::Open(dir_path, &error);
  if (dir == nullptr) {
    fprintf(stderr, "kvtier-exporter: %s\n", error.c_str());
    return 1;
  }
  if (once) {
    fputs(exporter::RenderExposition(dir->ReadAll()).c_str(), stdout);
    return fflush(stdout) == 0 ? 0 : 1;
  }

  std::unique_ptr<exporter::HttpServer> server = exporter::HttpServer::Listen(address, &error);
  if (server == nullptr) {
    fprintf(stderr, "kvtier-exporter: %s\n", error.c_str());
    return 1;
  }
  if (!address.loopback) {
    fprintf(
        stderr,
        "kvtier-exporter: warning: %s is not a loopback address; the statistics of every kvtier "
        "process this user can read are visible to the network\n",
        listen.c_str());
  }
  struct sigaction sa = {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  printf("kvtier-exporter listening on http://%s/metrics\n", server->BoundAddress().c_str());
  fflush(stdout);

  const stats::SegmentDir& segments = *dir;
  server->Serve(
      [&segments](const std::string& path) -> exporter::HttpResponse {
        if (path == "/metrics")
          return {200, exporter::kContentType, exporter::RenderExposition(segments.ReadAll())};
        if (path == "/") return {200, "text/html; charset=utf-8", kIndex};
        return {404, "", "not found; metrics are at /metrics\n"};
      },
      &g_stop);
  return 0;
}
