// kvtier-top's collector and renderers without a terminal: number
// formatting, rates from counter deltas, table widths, sorting, JSON
// escaping, the heat strip colouring.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tests/tools/json_lite.h"
#include "tools/top/collector.h"
#include "tools/top/format.h"
#include "tools/top/json_output.h"
#include "tools/top/layout.h"

namespace kvtier::top {
namespace {

constexpr uint64_t kGiB = 1ull << 30;

std::shared_ptr<kvtier_stats_segment> Segment(int32_t pid, uint64_t device_used,
                                              uint64_t update_ns) {
  auto s = std::make_shared<kvtier_stats_segment>();
  *s = kvtier_stats_segment{};
  s->pid = pid;
  s->start_time_ns = 1000;
  s->update_time_ns = update_ns;
  s->device_used_bytes = device_used;
  s->device_budget_bytes = 8 * kGiB;
  snprintf(s->command, sizeof s->command, "proc%d", pid);
  return s;
}

TEST(FormatTest, Sizes) {
  EXPECT_EQ(CompactBytes(0), "0");
  EXPECT_EQ(CompactBytes(3 * kGiB / 2), "1.5G");
  EXPECT_EQ(CompactBytes(80 * kGiB), "80G");
  EXPECT_EQ(CompactBytes(141 * kGiB), "141G");
  EXPECT_EQ(CompactBytes(1000 * kGiB), "1.0T");
  for (uint64_t v = 1; v < (1ull << 62); v = v * 3 + 1) EXPECT_LE(CompactBytes(v).size(), 4u) << v;
}

TEST(FormatTest, RatesAndCounts) {
  EXPECT_EQ(GBps(0), "0.00");
  EXPECT_EQ(GBps(1.34e9), "1.34");
  EXPECT_EQ(GBps(12.34e9), "12.3");
  EXPECT_EQ(GBps(123.4e9), "123");
  EXPECT_EQ(Compact(120), "120");
  EXPECT_EQ(Compact(12345), "12.3k");
  EXPECT_EQ(Compact(1.2e6), "1.2M");
  for (double v = 0; v < 1e20; v = v * 7 + 3) {
    EXPECT_LE(GBps(v).size(), 5u) << v;
    EXPECT_LE(Compact(v).size(), 5u) << v;
  }
  EXPECT_EQ(Duration(59ull * 1000000000), "59s");
  EXPECT_EQ(Duration(3723ull * 1000000000), "1h02m");
  EXPECT_EQ(HeatChar(0), ' ');
  EXPECT_EQ(HeatChar(255), '@');
  EXPECT_EQ(BarFill(0.5, 10), "|||||     ");
  EXPECT_EQ(BarFill(0.001, 10), "|         ");  // something is there
  EXPECT_EQ(BarFill(2.0, 4), "||||");
}

TEST(CollectorTest, RatesAreCounterDeltasOverPublishTime) {
  auto a = Segment(7, 0, 1'000'000'000);
  auto b = Segment(7, 0, 3'000'000'000);  // 2 s later
  a->demoted_bytes = 1'000'000'000;
  b->demoted_bytes = 5'000'000'000;
  b->promoted_bytes = 2'000'000'000;
  b->faults = 300;
  b->fault_bytes = 600;
  std::optional<Rates> r = ComputeRates(*a, *b);
  ASSERT_TRUE(r.has_value());
  EXPECT_DOUBLE_EQ(r->interval_s, 2.0);
  EXPECT_DOUBLE_EQ(r->demote_bps, 2e9);
  EXPECT_DOUBLE_EQ(r->promote_bps, 1e9);
  EXPECT_DOUBLE_EQ(r->faults_per_s, 150);
  EXPECT_DOUBLE_EQ(r->fault_bps, 300);
  EXPECT_DOUBLE_EQ(r->spill_bps, 0);
  // Nothing published in between: zero, not a division by zero.
  r = ComputeRates(*b, *b);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->demote_bps, 0);
  // Another process instance with the same pid, or time going back: none.
  auto c = Segment(7, 0, 4'000'000'000);
  c->start_time_ns = 2000;
  EXPECT_FALSE(ComputeRates(*b, *c).has_value());
  EXPECT_FALSE(ComputeRates(*b, *a).has_value());
}

Model ThreeProcesses() {
  Model m;
  m.dir = "/dev/shm";
  const std::vector<std::pair<int32_t, uint64_t>> rows = {
      {30, 1 * kGiB}, {10, 5 * kGiB}, {20, 3 * kGiB}};
  for (const auto& [pid, used] : rows) {
    Process p;
    p.seg = Segment(pid, used, 5);
    m.processes.push_back(p);
  }
  return m;
}

TEST(LayoutTest, SortsByTheChosenColumn) {
  Model m = ThreeProcesses();
  std::vector<int> pids;
  for (const Process* p : SortedProcesses(m, SortKey::kPid)) pids.push_back(p->seg->pid);
  EXPECT_EQ(pids, (std::vector<int>{10, 20, 30}));
  pids.clear();
  for (const Process* p : SortedProcesses(m, SortKey::kDevice)) pids.push_back(p->seg->pid);
  EXPECT_EQ(pids, (std::vector<int>{10, 20, 30}));  // 5, 3, 1 GiB
  m.processes[0].seg = Segment(30, 9 * kGiB, 5);
  pids.clear();
  for (const Process* p : SortedProcesses(m, SortKey::kDevice)) pids.push_back(p->seg->pid);
  EXPECT_EQ(pids, (std::vector<int>{30, 10, 20}));
  SortKey k = SortKey::kPid;
  for (int i = 0; i < 10; ++i) k = NextSortKey(k);
  EXPECT_EQ(k, SortKey::kPid);  // the cycle visits ten columns
}

TEST(LayoutTest, TableUsesTheWidthItIsGiven) {
  Model m = ThreeProcesses();
  for (int width : {80, 90, 100, 120, 132, 160, 200, 300}) {
    ViewOptions o;
    o.width = width;
    const int header = TableHeader(o).Width();
    const int row = ProcessRow(m.processes[0], o).Width();
    EXPECT_EQ(header, row) << width;
    EXPECT_LE(row, width) << width;
    EXPECT_GE(row, std::min(width, 200) - 6) << width;  // and uses it
    for (const Line& l : HeaderLines(m, o)) {
      if (l.spans.front().style != Style::kTitle) {
        EXPECT_LE(l.Width(), width) << l.Text();
      }
    }
  }
  ViewOptions narrow;
  narrow.width = 80;
  EXPECT_EQ(ProcessRow(m.processes[0], narrow).Width(), 80);
}

TEST(LayoutTest, HeatStripIsColouredByTier) {
  Process p;
  p.seg = Segment(1, 0, 5);
  auto seg = std::make_shared<kvtier_stats_segment>(*p.seg);
  seg->region_row_count = 1;
  kvtier_stats_region& r = seg->region_rows[0];
  r.size = 64ull << 20;
  for (int b = 0; b < KVTIER_STATS_HEAT_BUCKETS; ++b) {
    r.tier[b] = b < 16 ? 0 : 1;
    r.heat[b] = b < 16 ? 255 : 0;
  }
  p.seg = seg;
  Model m;
  m.processes.push_back(p);
  ViewOptions o;
  bool found = false;
  for (const Line& line : DetailLines(p, m, o)) {
    for (size_t i = 0; i + 1 < line.spans.size(); ++i) {
      if (line.spans[i].text == std::string(16, '@') && line.spans[i].style == Style::kDevice &&
          line.spans[i + 1].text == std::string(16, ' ') &&
          line.spans[i + 1].style == Style::kHost) {
        found = true;
      }
    }
  }
  EXPECT_TRUE(found);
}

TEST(JsonTest, StringsAreEscapedAndValidUtf8) {
  EXPECT_EQ(JsonString("a\"b\\c\n\t\x01"), "\"a\\\"b\\\\c\\n\\t\\u0001\"");
  EXPECT_EQ(JsonString("caf\xC3\xA9"), "\"caf\xC3\xA9\"");
  EXPECT_EQ(JsonString("cut \xE2\x82"), "\"cut \xEF\xBF\xBD\xEF\xBF\xBD\"");
  EXPECT_EQ(JsonString("\xED\xA0\x80"), "\"\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\"");  // a surrogate
}

TEST(JsonTest, ModelRendersAsOneValidDocument) {
  Model m = ThreeProcesses();
  m.processes[1].rates = Rates{1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0};
  m.problems.push_back({99, stats::ReadState::kRefused, "kvtier.99: \"version\" 2"});
  std::string text = RenderJson(m, 0.5);
  testing::Json json;
  std::string error;
  ASSERT_TRUE(testing::ParseJson(text, &json, &error)) << error << "\n" << text;
  EXPECT_EQ(json["processes"].size(), 3u);
  EXPECT_EQ(json["processes"][1]["rates"]["demote_bytes_per_s"].Number(), 3.0);
  EXPECT_TRUE(json["processes"][0]["rates"].IsNull());
  EXPECT_EQ(json["problems"][0]["message"].text, "kvtier.99: \"version\" 2");
  EXPECT_EQ(json["rate_interval_s"].Number(), 0.5);
}

}  // namespace
}  // namespace kvtier::top
