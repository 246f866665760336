// kvtier-bench spill, run as a program on a small size: every phase runs,
// no page comes back wrong, the fault phases pass; bad arguments exit 2.
// (Its throughput figures are for people; this only checks it works.) The
// CUDA phase on the host stand-in, whether or not a GPU answers: the lines
// checked are the stand-in's.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "tests/tools/tool_test_util.h"

namespace kvtier::bench {
namespace {

constexpr auto kTimeout = std::chrono::seconds(120);

TEST(SpillBench, EveryPhaseRunsAndNothingComesBackWrong) {
  kvtier::testing::TempDir tmp;
  kvtier::testing::RunResult r = kvtier::testing::Run(
      {KVTIER_BENCH_BIN, "spill", "--dir", tmp.path() + "/spill", "--size", "32M", "--page-size",
       "2M", "--qd", "4", "--rounds", "1", "--samples", "8", "--no-fio", "--cuda", "host"},
      kTimeout);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const char* says :
       {"write GB/s", "read GB/s", "restore, tiny device", "fault-in p99 ms",
        "sim GPU restore: ", "kvtier_wait: ", "of which the install (UFFDIO_COPY",
        "of which the stand-in's copy", ", 0 pages wrong after all rounds)",
        "memory a restore fills (what its spill freed), on one core: freed just before ",
        "PASS: no page lost or handed back wrong", "PASS: every page came back exactly"}) {
    EXPECT_NE(r.out.find(says), std::string::npos) << says << "\n" << r.out;
  }
  EXPECT_EQ(r.out.find("FAIL"), std::string::npos) << r.out;
}

TEST(SpillBench, RefusesBadArgumentsWithExitTwo) {
  kvtier::testing::TempDir tmp;
  const std::vector<std::vector<std::string>> cases = {
      {"--page-size", "3M"}, {"--qd", "0"}, {"--size", "2M", "--qd", "8"}, {"--bogus", "1"}};
  for (const auto& args : cases) {
    std::vector<std::string> argv = {KVTIER_BENCH_BIN, "spill", "--dir", tmp.path()};
    argv.insert(argv.end(), args.begin(), args.end());
    kvtier::testing::RunResult r = kvtier::testing::Run(argv, kTimeout);
    EXPECT_EQ(r.exit_code, 2) << args[0] << "\n" << r.out << r.err;
    EXPECT_NE(r.err.find("kvtier-bench spill: "), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace kvtier::bench
