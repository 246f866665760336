// kvtier-bench multiround --endpoint's pieces that need no server: the
// endpoint's parsing, the prompt words, and a run read back for --combine.
// The client against real and broken servers: tests/engines/llama.cpp/server_test.sh.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "tools/bench/endpoint_run.h"
#include "tools/bench/mr_report.h"
#include "tools/bench/openai_client.h"

namespace kvtier::bench {
namespace {

TEST(EndpointTest, ParsesHostPortAndPath) {
  Result<Endpoint> e = ParseEndpoint("http://127.0.0.1:8080/v1/");
  ASSERT_TRUE(e.ok()) << e.status().message();
  EXPECT_EQ(e.value().host, "127.0.0.1");
  EXPECT_EQ(e.value().port, "8080");
  EXPECT_EQ(e.value().base, "/v1");
  EXPECT_EQ(e.value().Url(), "http://127.0.0.1:8080/v1");
  Result<Endpoint> bare = ParseEndpoint("http://server");
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ(bare.value().port, "80");
  EXPECT_EQ(bare.value().base, "");
}

TEST(EndpointTest, RefusesWhatItCannotSpeak) {
  for (const char* url : {"https://server/v1", "server:8080/v1", "http://", "http://:80/v1",
                          "http://h:0/v1", "http://h:65536/v1", "http://h:8o/v1", "http://h:/v1"}) {
    Result<Endpoint> e = ParseEndpoint(url);
    ASSERT_FALSE(e.ok()) << url;
    EXPECT_NE(e.status().message().find(url), std::string::npos) << url;
  }
}

TEST(EndpointTest, PromptWordsAreOneSeedsTwoLetterWords) {
  const std::string a = PromptWords(7, 500);
  EXPECT_EQ(a, PromptWords(7, 500));
  EXPECT_NE(a, PromptWords(8, 500));
  std::istringstream in(a);
  std::string word;
  std::set<std::string> distinct;
  int n = 0;
  while (in >> word) {
    ++n;
    ASSERT_EQ(word.size(), 2u) << word;
    EXPECT_NE(std::string("aeiost").find(word[0]), std::string::npos) << word;
    EXPECT_TRUE(word[1] >= 'a' && word[1] <= 'z') << word;
    distinct.insert(word);
  }
  EXPECT_EQ(n, 500);
  EXPECT_GT(distinct.size(), 100u);  // drawn, not repeated
  EXPECT_EQ(PromptWords(7, 0), "");
}

class ReadRunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kvtier-endpoint-test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static SystemResult Sample() {
    SystemResult r;
    r.name = "kvtier";
    r.wall_s = 42.5;
    r.late_launches = 3;
    for (int i = 0; i < 5; ++i) {
      RequestRow q;
      q.prompt_tokens = 1000 + i;
      q.generation_tokens = 32;
      q.ttft = 0.125 * (i + 1);
      q.generation_time = 0.5;
      q.user_id = i;
      q.question_id = 1 + i % 2;
      q.returning = i >= 2;  // the first two are users' first requests
      q.launch_time = 10.0 * i;
      q.finish_time = 10.0 * i + 0.625;
      q.hit_device = 600;
      q.recomputed = q.prompt_tokens - 600;
      r.rows.push_back(q);
    }
    return r;
  }

  std::string dir_;
};

TEST_F(ReadRunTest, GivesBackWhatTheRunWrote) {
  const SystemResult written = Sample();
  ASSERT_TRUE(WriteRequestsCsv(dir_ + "/requests-kvtier.csv", written).ok());
  ASSERT_TRUE(WriteSummaryCsv(dir_ + "/summary.csv", {written}).ok());
  Result<SystemResult> read = ReadEndpointRun(dir_);
  ASSERT_TRUE(read.ok()) << read.status().message();
  const SystemResult& r = read.value();
  EXPECT_EQ(r.name, "kvtier");
  EXPECT_DOUBLE_EQ(r.wall_s, 42.5);
  EXPECT_EQ(r.late_launches, 3);
  ASSERT_EQ(r.rows.size(), written.rows.size());
  for (size_t i = 0; i < r.rows.size(); ++i) {
    EXPECT_EQ(r.rows[i].prompt_tokens, written.rows[i].prompt_tokens);
    EXPECT_DOUBLE_EQ(r.rows[i].ttft, written.rows[i].ttft);
    EXPECT_EQ(r.rows[i].recomputed, written.rows[i].recomputed);
    EXPECT_EQ(r.rows[i].hit_device, written.rows[i].hit_device);
    EXPECT_EQ(r.rows[i].user_id, written.rows[i].user_id);
    EXPECT_EQ(r.rows[i].returning, written.rows[i].returning);
  }
  EXPECT_TRUE(r.knows_returning);
  const Summary a = Summarize(written), b = Summarize(r);
  EXPECT_DOUBLE_EQ(a.ttft_mean, b.ttft_mean);
  EXPECT_DOUBLE_EQ(a.recomputed, b.recomputed);
  EXPECT_EQ(b.returning, written.rows.size() - 2);
  EXPECT_DOUBLE_EQ(a.returning_mean, b.returning_mean);
  EXPECT_GT(b.returning_mean, 0);
}

// The returning requests' figures are theirs alone, and the table prints
// them beside every request's; a run written before the column existed
// reads back with them unknown ("-"), not as zero returning requests.
TEST_F(ReadRunTest, ReturningRequestsApartAndUnknownInOlderRuns) {
  const SystemResult written = Sample();
  const Summary s = Summarize(written);
  double sum = 0;
  size_t n = 0;
  for (const RequestRow& q : written.rows) {
    if (!q.returning) continue;
    sum += q.ttft;
    ++n;
  }
  ASSERT_GT(n, 0u);
  EXPECT_DOUBLE_EQ(s.returning_mean, sum / n);
  EXPECT_NE(s.returning_mean, s.ttft_mean);

  ASSERT_TRUE(WriteRequestsCsv(dir_ + "/requests-kvtier.csv", written).ok());
  ASSERT_TRUE(WriteSummaryCsv(dir_ + "/summary.csv", {written}).ok());
  // The same run without the column, as an older client wrote it.
  std::ifstream in(dir_ + "/requests-kvtier.csv");
  std::string old, line;
  while (std::getline(in, line)) old += line.substr(0, line.rfind(',')) + "\n";
  in.close();
  std::ofstream(dir_ + "/requests-kvtier.csv") << old;
  Result<SystemResult> read = ReadEndpointRun(dir_);
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_FALSE(read.value().knows_returning);

  char* text = nullptr;
  size_t size = 0;
  FILE* out = open_memstream(&text, &size);
  PrintEndpointTable(out, {written, read.value()}, "kvtier");
  fclose(out);
  const std::string table(text, size);
  free(text);
  char mean[16];
  snprintf(mean, sizeof mean, "%.3f", s.returning_mean);
  EXPECT_NE(table.find(mean), std::string::npos) << table;
  char unknown[32];
  snprintf(unknown, sizeof unknown, "%-14s %5s |", "kvtier", "-");
  EXPECT_NE(table.find(unknown), std::string::npos) << table;
}

TEST_F(ReadRunTest, RefusesWhatIsNotOneRun) {
  Result<SystemResult> empty = ReadEndpointRun(dir_);
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("no requests-*.csv"), std::string::npos);

  const SystemResult written = Sample();
  ASSERT_TRUE(WriteRequestsCsv(dir_ + "/requests-kvtier.csv", written).ok());
  Result<SystemResult> no_summary = ReadEndpointRun(dir_);
  ASSERT_FALSE(no_summary.ok());
  EXPECT_NE(no_summary.status().message().find("summary.csv"), std::string::npos);

  ASSERT_TRUE(WriteSummaryCsv(dir_ + "/summary.csv", {written}).ok());
  std::ofstream(dir_ + "/requests-kvtier.csv", std::ios::app) << "1,2,3\n";
  Result<SystemResult> short_row = ReadEndpointRun(dir_);
  ASSERT_FALSE(short_row.ok());
  EXPECT_NE(short_row.status().message().find("has 3 fields"), std::string::npos)
      << short_row.status().message();

  ASSERT_TRUE(WriteRequestsCsv(dir_ + "/requests-kvtier.csv", written).ok());
  ASSERT_TRUE(WriteRequestsCsv(dir_ + "/requests-other.csv", written).ok());
  Result<SystemResult> two = ReadEndpointRun(dir_);
  ASSERT_FALSE(two.ok());
  EXPECT_NE(two.status().message().find("more than one"), std::string::npos);

  Result<SystemResult> missing = ReadEndpointRun(dir_ + "/nope");
  EXPECT_FALSE(missing.ok());
}

}  // namespace
}  // namespace kvtier::bench
