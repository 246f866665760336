// Read-ahead that pays for itself, on a whole host-backend runtime: an
// engine that reads, step after step, more KV than the budget holds (each
// layer's K and V in turn, as llama.cpp's one KV buffer lays them out) gets
// back from SSD about what it reads, not the other layers read ahead of it
// and pushed out again before its touch; and the pages read in vain are
// counted (readahead_vain_pages).
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "runtime/runtime.h"
#include "tests/sim/host_runtime_util.h"
#include "tests/sim/sim_disk_test_util.h"

namespace kvtier::testing {
namespace {

TEST_F(SimDiskTest, AnEngineCyclingThroughMoreThanTheBudgetReadsLittleMoreThanItNeeds) {
  storage_test::TempDir stats_dir("/dev/shm");
  ASSERT_TRUE(stats_dir.ok());
  std::map<std::string, std::string> values = SpillingHostValues(dir_.path(), stats_dir.path());
  values["KVTIER_HOST_BUDGET"] = "16M";
  values["KVTIER_DISK_BUDGET"] = "256M";
  Result<std::unique_ptr<Runtime>> made = MakeHostRuntime(values);
  ASSERT_TRUE(made.ok()) << made.status().message();
  Runtime& rt = *made.value();
  // 4 layers of K and V, 4 MiB each: 32 MiB, twice the budget (llama.cpp's
  // KV of an 8,000-token session of a small model).
  constexpr size_t kPart = 4 * kMiB, kParts = 8, kBytes = kPart * kParts;
  Result<void*> base = rt.CreateRegion(kBytes, nullptr);
  ASSERT_TRUE(base.ok()) << base.status().message();
  auto* p = static_cast<uint8_t*>(base.value());
  ASSERT_EQ(WriteThenReadBack(p, kBytes), -1);
  const uint64_t read_before = Counters::Get(rt.counters().restored_bytes);

  // Steps of a decode: the step's new cell written in every layer's K and
  // V (its faults a layer apart teach the device the stride), then every
  // layer's K, then its V, cell after cell.
  constexpr int kSteps = 4;
  for (int step = 0; step < kSteps; ++step) {
    for (size_t part = 0; part < kParts; ++part) {
      const size_t off = part * kPart + kPart / 2 + static_cast<size_t>(step) * 64 * 1024;
      p[off] = static_cast<uint8_t>(off >> 12 | 1);  // the bytes it holds: a write all the same
    }
    for (size_t part = 0; part < kParts; ++part) {
      for (size_t off = part * kPart; off < (part + 1) * kPart; off += 4096) {
        ASSERT_EQ(p[off], static_cast<uint8_t>(off >> 12 | 1)) << "step " << step << " " << off;
      }
    }
  }
  const uint64_t read = Counters::Get(rt.counters().restored_bytes) - read_before;
  // At most every step's bytes from SSD (none stays in a budget it
  // cycles through), and half as much again.
  EXPECT_LE(read, kSteps * kBytes * 3 / 2)
      << "read " << read / kMiB << " MiB from SSD for " << kSteps * kBytes / kMiB
      << " MiB of steps: read ahead and pushed out before the touch";
  EXPECT_GT(Counters::Get(rt.counters().readahead_vain_pages), 0u)
      << "no page read ahead was seen to come back in vain";
  ASSERT_TRUE(rt.FreeRegion(base.value()));
}

}  // namespace
}  // namespace kvtier::testing
