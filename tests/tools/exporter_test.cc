// kvtier-exporter: every exposition line parses (exposition_parser.h), names
// and types follow the conventions, labels escape, the HTTP server answers
// scrapes whose counters rise while the writer publishes, and the examples
// query only exported metrics.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/stats_segment.h"
#include "tests/tools/exposition_parser.h"
#include "tests/tools/json_lite.h"
#include "tests/tools/synthetic.h"
#include "tests/tools/tool_test_util.h"
#include "tools/exporter/exposition.h"
#include "tools/exporter/http_server.h"
#include "tools/stats/stats_fields.h"

namespace kvtier {
namespace {

using namespace std::chrono_literals;
using testing::Exposition;
using testing::ParseExposition;
using testing::RunResult;
using testing::Sample;
using testing::Synthetic;

// ---- HTTP client ----

struct HttpReply {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  std::string raw;
};

HttpReply Http(int port, const std::string& request) {
  HttpReply reply;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return reply;
  }
  send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  char buf[4096];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof buf, 0)) > 0) reply.raw.append(buf, static_cast<size_t>(n));
  close(fd);
  const size_t end = reply.raw.find("\r\n\r\n");
  if (end == std::string::npos) return reply;
  std::istringstream head(reply.raw.substr(0, end));
  std::string line;
  std::getline(head, line);
  if (line.rfind("HTTP/1.1 ", 0) == 0) reply.status = atoi(line.c_str() + 9);
  while (std::getline(head, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const size_t colon = line.find(':');
    std::string name = line.substr(0, colon);
    for (char& c : name) c = static_cast<char>(tolower(static_cast<unsigned char>(c)));
    reply.headers[name] = line.substr(colon + 2);
  }
  reply.body = reply.raw.substr(end + 4);
  return reply;
}

// ---- Tests ----

constexpr char kOddCommand[] = "odd \"name\" \\ with\nnewline";

class ExporterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StatsIdentity id;
    id.command = kOddCommand;
    id.backend = "sim";
    id.policy = "lru";
    id.disk_io = "off";
    id.page_size = Synthetic::kPageSize;
    auto seg = StatsSegment::Create(dir_.path(), id);
    ASSERT_TRUE(seg.ok()) << seg.status().message();
    seg_ = std::move(seg).value();
    Publish(10);
  }
  void Publish(uint64_t step) {
    process_.Step(step);
    seg_->Publish(process_.counters(), process_.regions());
  }
  Exposition Once() {
    RunResult r = testing::Run({KVTIER_EXPORTER_BIN, "--once", "--dir", dir_.path()}, 30s);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    Exposition e;
    std::string error;
    EXPECT_TRUE(ParseExposition(r.out, &e, &error)) << error;
    return e;
  }

  testing::TempDir dir_;
  std::unique_ptr<StatsSegment> seg_;
  testing::SyntheticProcess process_;
};

TEST_F(ExporterTest, EveryFieldIsAWellFormedFamily) {
  Exposition e = Once();
  const int pid = getpid();
  kvtier_stats_segment expected{};
#define KVTIER_STAT(name, kind, doc) expected.name = Counters::Get(process_.counters().name);
#include "kvtier/stats_fields.def"
#undef KVTIER_STAT
  for (const stats::FieldInfo& f : stats::Fields()) {
    const bool counter = f.kind == stats::FieldKind::kCounter;
    // Nanosecond fields are exported in seconds, as Prometheus expects.
    std::string base = f.name;
    const bool ns = base.size() > 3 && base.compare(base.size() - 3, 3, "_ns") == 0;
    if (ns) base.replace(base.size() - 3, 3, "_seconds");
    const std::string name = "kvtier_" + base + (counter ? "_total" : "");
    EXPECT_EQ(e.type[name], counter ? "counter" : "gauge") << name;
    EXPECT_EQ(e.help[name], f.doc) << name;
    const double want = static_cast<double>(f.get(expected)) / (ns ? 1e9 : 1.0);
    EXPECT_NEAR(e.Value(name, pid), want, ns ? 1e-9 : 0.0) << name;
  }
  EXPECT_EQ(e.type.count("kvtier_fault_ns_total"), 0u) << "time must be exported in seconds";
  EXPECT_EQ(e.Value("kvtier_demoted_bytes_total", pid), 10.0 * Synthetic::kDemotedBytes);
  EXPECT_EQ(e.Value("kvtier_device_used_bytes", pid), static_cast<double>(Synthetic::kDeviceUsed));
  for (const auto& [name, type] : e.type) {
    EXPECT_EQ(name.rfind("kvtier_", 0), 0u) << name;
    const bool total = name.size() > 6 && name.compare(name.size() - 6, 6, "_total") == 0;
    EXPECT_EQ(type == "counter", total) << name << " is a " << type;
    EXPECT_TRUE(e.help.count(name)) << name;
  }
  for (const Sample& s : e.samples) {
    EXPECT_TRUE(e.type.count(s.name)) << "sample without TYPE: " << s.name;
    if (s.name == "kvtier_processes") continue;
    EXPECT_EQ(s.labels.at("command"), kOddCommand) << s.name;  // escaped and back
  }
  EXPECT_EQ(e.Value("kvtier_up", pid), 1.0);
  EXPECT_EQ(e.samples.front().name, "kvtier_processes");
  EXPECT_EQ(e.samples.front().value, 1.0);
  EXPECT_EQ(e.Value("kvtier_page_size_bytes", pid), static_cast<double>(Synthetic::kPageSize));
  EXPECT_GT(e.Value("kvtier_start_time_seconds", pid), 1.6e9);
}

TEST_F(ExporterTest, EachGpuOfAProcessIsASeries) {
  constexpr uint64_t kGiB = uint64_t{1} << 30;
  seg_->Publish(process_.counters(), process_.regions(),
                {{0, 3 * kGiB, 4 * kGiB}, {1, 1 * kGiB, 2 * kGiB}});
  Exposition e = Once();
  EXPECT_EQ(e.type["kvtier_gpu_used_bytes"], "gauge");
  EXPECT_EQ(e.type["kvtier_gpu_budget_bytes"], "gauge");
  std::map<std::string, std::pair<double, double>> gpus;  // ordinal -> (used, budget)
  for (const Sample& s : e.samples) {
    if (s.name != "kvtier_gpu_used_bytes" && s.name != "kvtier_gpu_budget_bytes") continue;
    EXPECT_EQ(s.labels.at("pid"), std::to_string(getpid()));
    EXPECT_EQ(s.labels.at("command"), kOddCommand);
    auto& row = gpus[s.labels.at("gpu")];
    (s.name == "kvtier_gpu_used_bytes" ? row.first : row.second) = s.value;
  }
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus["0"], std::make_pair(3.0 * kGiB, 4.0 * kGiB));
  EXPECT_EQ(gpus["1"], std::make_pair(1.0 * kGiB, 2.0 * kGiB));
}

TEST_F(ExporterTest, RefusedSegmentIsReportedDown) {
  kvtier_stats_segment other{};
  other.magic = KVTIER_STATS_MAGIC;
  other.version = KVTIER_STATS_VERSION + 1;
  other.size = sizeof other;
  ASSERT_TRUE(testing::WriteFile(dir_.path() + "/kvtier." + std::to_string(getppid()), &other,
                                 sizeof other));
  Exposition e = Once();
  EXPECT_EQ(e.Value("kvtier_up", getppid()), 0.0);
  EXPECT_EQ(e.Value("kvtier_up", getpid()), 1.0);
  EXPECT_EQ(e.samples.front().value, 1.0);  // kvtier_processes counts readable ones
}

TEST(ExpositionTest, EscapesLabelValuesAndHelp) {
  EXPECT_EQ(exporter::EscapeLabelValue("plain"), "plain");
  EXPECT_EQ(exporter::EscapeLabelValue("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  EXPECT_EQ(exporter::EscapeLabelValue("bad \xff byte"), "bad \xEF\xBF\xBD byte");
  EXPECT_EQ(exporter::EscapeLabelValue("caf\xC3\xA9"), "caf\xC3\xA9");
  EXPECT_EQ(exporter::EscapeHelp("a \"quoted\" \\ help\nline"), "a \"quoted\" \\\\ help\\nline");
}

TEST(ExpositionTest, ParsesListenAddresses) {
  exporter::ListenAddress a;
  std::string error;
  ASSERT_TRUE(exporter::ParseListenAddress("127.0.0.1:9464", &a, &error)) << error;
  EXPECT_TRUE(a.loopback);
  EXPECT_EQ(exporter::FormatAddress(a.addr), "127.0.0.1:9464");
  ASSERT_TRUE(exporter::ParseListenAddress("[::1]:0", &a, &error)) << error;
  EXPECT_TRUE(a.loopback);
  EXPECT_EQ(exporter::FormatAddress(a.addr), "[::1]:0");
  ASSERT_TRUE(exporter::ParseListenAddress("localhost:80", &a, &error)) << error;
  EXPECT_TRUE(a.loopback);
  ASSERT_TRUE(exporter::ParseListenAddress("0.0.0.0:9464", &a, &error)) << error;
  EXPECT_FALSE(a.loopback);
  for (const char* bad :
       {"9464", "127.0.0.1", "127.0.0.1:70000", "host:9464", "[::1]9464", "127.0.0.1:x"}) {
    EXPECT_FALSE(exporter::ParseListenAddress(bad, &a, &error)) << bad;
    EXPECT_NE(error.find(bad), std::string::npos) << error;
  }
}

TEST_F(ExporterTest, ServesScrapesWhoseCountersRise) {
  testing::Child exporter({KVTIER_EXPORTER_BIN, "--listen", "127.0.0.1:0", "--dir", dir_.path()});
  std::string first;
  ASSERT_TRUE(exporter.ReadLine(&first, 10s)) << "the exporter did not start";
  const std::string prefix = "kvtier-exporter listening on http://127.0.0.1:";
  ASSERT_EQ(first.rfind(prefix, 0), 0u) << first;
  const int port = atoi(first.c_str() + prefix.size());
  ASSERT_GT(port, 0) << first;

  HttpReply reply = Http(port, "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n");
  ASSERT_EQ(reply.status, 200) << reply.raw;
  EXPECT_EQ(reply.headers["content-type"], "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_EQ(reply.headers["connection"], "close");
  EXPECT_EQ(reply.headers["content-length"], std::to_string(reply.body.size()));
  Exposition before;
  std::string error;
  ASSERT_TRUE(ParseExposition(reply.body, &before, &error)) << error;
  const double demoted_before = before.Value("kvtier_demoted_bytes_total", getpid());
  EXPECT_EQ(demoted_before, 10.0 * Synthetic::kDemotedBytes);

  // The writer publishes more; the next scrape reads it fresh.
  for (uint64_t step = 11; step <= 20; ++step) Publish(step);
  reply = Http(port, "GET /metrics?x=1 HTTP/1.1\r\nHost: localhost\r\n\r\n");
  ASSERT_EQ(reply.status, 200) << reply.raw;
  Exposition after;
  ASSERT_TRUE(ParseExposition(reply.body, &after, &error)) << error;
  for (const auto& [name, type] : after.type) {
    if (type != "counter") continue;
    const double a = after.Value(name, getpid()), b = before.Value(name, getpid());
    EXPECT_GE(a, b) << name << " went down";
  }
  EXPECT_EQ(after.Value("kvtier_demoted_bytes_total", getpid()), 20.0 * Synthetic::kDemotedBytes);
  EXPECT_GT(after.Value("kvtier_faults_total", getpid()),
            before.Value("kvtier_faults_total", getpid()));

  // Other requests.
  reply = Http(port, "HEAD /metrics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(reply.status, 200);
  EXPECT_TRUE(reply.body.empty());
  EXPECT_GT(atoi(reply.headers["content-length"].c_str()), 1000);
  EXPECT_EQ(Http(port, "GET /nope HTTP/1.1\r\n\r\n").status, 404);
  reply = Http(port, "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
  EXPECT_EQ(reply.status, 405);
  EXPECT_EQ(reply.headers["allow"], "GET, HEAD");
  EXPECT_EQ(Http(port, "garbage\r\n\r\n").status, 400);
  EXPECT_EQ(Http(port, "GET / HTTP/2.0\r\n\r\n").status, 505);
  const std::string huge =
      "GET /metrics HTTP/1.1\r\nX-Pad: " + std::string(exporter::kMaxRequestBytes, 'a') +
      "\r\n\r\n";
  EXPECT_EQ(Http(port, huge).status, 431);
  // Still serving after all that.
  EXPECT_EQ(Http(port, "GET /metrics HTTP/1.0\r\n\r\n").status, 200);

  EXPECT_EQ(exporter.Stop(SIGTERM, 10s), 0);
}

TEST_F(ExporterTest, UsageAndListenErrors) {
  RunResult r = testing::Run({KVTIER_EXPORTER_BIN, "--listen", "nowhere"}, 30s);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--listen nowhere: no port"), std::string::npos) << r.err;
  r = testing::Run({KVTIER_EXPORTER_BIN, "--bogus"}, 30s);
  EXPECT_EQ(r.exit_code, 2);
  r = testing::Run({KVTIER_EXPORTER_BIN, "--once", "--dir", "/nonexistent-kvtier-dir"}, 30s);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("/nonexistent-kvtier-dir"), std::string::npos) << r.err;

  // A port already taken.
  testing::Child first({KVTIER_EXPORTER_BIN, "--listen", "127.0.0.1:0", "--dir", dir_.path()});
  std::string line;
  ASSERT_TRUE(first.ReadLine(&line, 10s));
  const std::string taken =
      line.substr(line.find("127.0.0.1:"), line.find("/metrics") - line.find("127.0.0.1:"));
  r = testing::Run({KVTIER_EXPORTER_BIN, "--listen", taken, "--dir", dir_.path()}, 30s);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("cannot listen"), std::string::npos) << r.err;
}

// The examples query only metrics the exporter produces (a renamed field
// would leave a dashboard panel silently empty).
TEST_F(ExporterTest, ExamplesUseOnlyExportedMetrics) {
  Exposition e = Once();
  std::set<std::string> known;
  for (const auto& [name, type] : e.type) known.insert(name);
  for (const char* file : {"/examples/grafana-dashboard.json", "/examples/prometheus.yml"}) {
    std::ifstream in(std::string(KVTIER_SOURCE_DIR) + file);
    ASSERT_TRUE(in) << file;
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (std::string(file).find(".json") != std::string::npos) {
      testing::Json json;
      std::string error;
      EXPECT_TRUE(testing::ParseJson(text, &json, &error)) << file << ": " << error;
    }
    int uses = 0;
    for (size_t at = text.find("kvtier_"); at != std::string::npos;
         at = text.find("kvtier_", at + 1)) {
      if (at > 0 && (isalnum(static_cast<unsigned char>(text[at - 1])) || text[at - 1] == '_' ||
                     text[at - 1] == '-')) {
        continue;
      }
      size_t end = at;
      while (end < text.size() &&
             (islower(static_cast<unsigned char>(text[end])) || text[end] == '_'))
        ++end;
      const std::string name = text.substr(at, end - at);
      EXPECT_TRUE(known.count(name))
          << file << " uses " << name << ", which the exporter does not produce";
      ++uses;
    }
    EXPECT_GT(uses, 3) << file;
  }
}

TEST(ExpositionParserTest, RejectsMalformedLines) {
  Exposition e;
  std::string error;
  EXPECT_TRUE(ParseExposition("# TYPE a_total counter\na_total{x=\"1\"} 2\n", &e, &error)) << error;
  for (const char* bad :
       {"a 1", "a{x=\"1} 2\n", "a{x=1} 2\n", "a{x=\"\\q\"} 1\n", "1a 2\n", "a 1 2 3\n", "a 0x10\n",
        "# TYPE a counter\n# TYPE a gauge\n", "a 1\n# TYPE a gauge\n", "a 1\nb 1\na 2\n"}) {
    Exposition x;
    EXPECT_FALSE(ParseExposition(bad, &x, &error)) << bad;
  }
}

}  // namespace
}  // namespace kvtier
