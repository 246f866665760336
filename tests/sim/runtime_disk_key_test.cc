// The disk tier's key stays in memory: a host-backend runtime spills and
// restores pages with every move logged and its stats segment published,
// and neither the log, the segment nor the exit summary holds the key, raw
// or written out in hex.
#include <gtest/gtest.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>

#include "runtime/log.h"
#include "runtime/runtime.h"
#include "runtime/storage/spill_store.h"
#include "tests/sim/host_runtime_util.h"
#include "tests/sim/sim_disk_test_util.h"

namespace kvtier::testing {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// The key's bytes, raw and as lower- and upper-case hex.
bool HoldsKey(const std::string& bytes, const uint8_t* key) {
  std::string hex_lower, hex_upper;
  char two[3];
  for (int i = 0; i < 32; ++i) {
    snprintf(two, sizeof two, "%02x", key[i]);
    hex_lower += two;
    snprintf(two, sizeof two, "%02X", key[i]);
    hex_upper += two;
  }
  const std::string raw(reinterpret_cast<const char*>(key), 32);
  // 8 bytes of the key are already far too many to write anywhere.
  return bytes.find(raw.substr(0, 8)) != std::string::npos ||
         bytes.find(hex_lower.substr(0, 16)) != std::string::npos ||
         bytes.find(hex_upper.substr(0, 16)) != std::string::npos;
}

TEST_F(SimDiskTest, TheKeyIsInNoLogStatsSegmentOrSummary) {
  storage_test::TempDir stats_dir("/dev/shm");
  ASSERT_TRUE(stats_dir.ok());
  std::map<std::string, std::string> values = SpillingHostValues(dir_.path(), stats_dir.path());
  values["KVTIER_VERBOSE"] = "3";

  // Everything kvtier logs from here on goes to a file.
  const std::string log_path = dir_.path() + "/log";
  fflush(stderr);
  const int saved_stderr = dup(2);
  FILE* log = fopen(log_path.c_str(), "w");
  ASSERT_NE(log, nullptr);
  dup2(fileno(log), 2);
  const int saved_level = g_log_level.exchange(3);

  std::string segment, summary;
  void* key_page = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(key_page, MAP_FAILED);
  madvise(key_page, 4096, MADV_DONTDUMP);
  auto* key = static_cast<uint8_t*>(key_page);
  uint64_t spilled = 0, restored = 0;
  {
    Result<std::unique_ptr<Runtime>> made = MakeHostRuntime(values);
    ASSERT_TRUE(made.ok()) << made.status().message();
    Runtime& rt = *made.value();
    ASSERT_NE(rt.store(), nullptr);
    ASSERT_TRUE(rt.store()->encrypts()) << "encryption is on by default";
    rt.store()->cipher()->CopyKeyForTest(key);
    // Four times the budget.
    Result<void*> base = rt.CreateRegion(16 * kMiB, nullptr);
    ASSERT_TRUE(base.ok()) << base.status().message();
    ASSERT_EQ(WriteThenReadBack(static_cast<uint8_t*>(base.value()), 16 * kMiB), -1);
    spilled = Counters::Get(rt.counters().spilled_pages);
    restored = Counters::Get(rt.counters().restored_pages);
    for (const auto& e : std::filesystem::directory_iterator(stats_dir.path())) {
      segment += ReadAll(e.path());
    }
    summary = rt.SummaryText();
    ASSERT_TRUE(rt.FreeRegion(base.value()));
  }
  fflush(stderr);
  dup2(saved_stderr, 2);
  close(saved_stderr);
  fclose(log);
  g_log_level.store(saved_level);
  const std::string logged = ReadAll(log_path);

  EXPECT_GT(spilled, 0u);
  EXPECT_GT(restored, 0u);
  EXPECT_FALSE(segment.empty()) << "no stats segment was published";
  EXPECT_NE(logged.find("sealed with AES-256-GCM"), std::string::npos) << logged.substr(0, 2000);
  EXPECT_NE(summary.find("pages sealed with AES-256-GCM"), std::string::npos) << summary;
  EXPECT_FALSE(HoldsKey(logged, key)) << "the key is in the log";
  EXPECT_FALSE(HoldsKey(segment, key)) << "the key is in the stats segment";
  EXPECT_FALSE(HoldsKey(summary, key)) << "the key is in the summary";
  memset(key, 0, 32);
  munmap(key_page, 4096);
}

}  // namespace
}  // namespace kvtier::testing
