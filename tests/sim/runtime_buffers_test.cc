// kvtier's own buffers are seen and given back: a host-backend runtime with
// a disk tier spills and restores pages, publishes what its I/O buffers and
// kept copies hold (buffer_bytes) and says it in its exit summary, and once
// it is gone every buffer it made is unmapped.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <string>
#include <thread>

#include "runtime/runtime.h"
#include "runtime/storage/env.h"
#include "tests/sim/host_runtime_util.h"
#include "tests/sim/sim_disk_test_util.h"

namespace kvtier::testing {
namespace {

TEST_F(SimDiskTest, OwnBuffersArePublishedSummedUpAndGivenBack) {
  storage_test::TempDir stats_dir("/dev/shm");
  ASSERT_TRUE(stats_dir.ok());
  const std::map<std::string, std::string> values =
      SpillingHostValues(dir_.path(), stats_dir.path());

  const uint64_t before = AlignedBuffer::live_bytes();
  uint64_t published = 0;
  std::string summary;
  {
    Result<std::unique_ptr<Runtime>> made = MakeHostRuntime(values);
    ASSERT_TRUE(made.ok()) << made.status().message();
    Runtime& rt = *made.value();
    // Four times the budget.
    Result<void*> base = rt.CreateRegion(16 * kMiB, nullptr);
    ASSERT_TRUE(base.ok()) << base.status().message();
    ASSERT_EQ(WriteThenReadBack(static_cast<uint8_t*>(base.value()), 16 * kMiB), -1);
    ASSERT_GT(Counters::Get(rt.counters().restored_pages), 0u);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (Counters::Get(rt.counters().buffer_bytes) < 2 * kMiB &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();  // a condition: the policy thread publishes it
    }
    published = Counters::Get(rt.counters().buffer_bytes);
    EXPECT_LE(published, AlignedBuffer::peak_bytes());
    summary = rt.SummaryText();
    ASSERT_TRUE(rt.FreeRegion(base.value()));
  }
  // At least the store's bounce buffer and the restore pipeline's reads.
  EXPECT_GE(published, 2 * kMiB) << "buffer_bytes was not published";
  EXPECT_NE(summary.find("  own buffers       "), std::string::npos) << summary;
  EXPECT_EQ(summary.find("own buffers       0 B now"), std::string::npos) << summary;
  EXPECT_EQ(AlignedBuffer::live_bytes(), before) << "buffers outlived the runtime";
}

}  // namespace
}  // namespace kvtier::testing
