// host_memory: which virtio devices count as a balloon that reports free
// memory (a sysfs tree built in a temporary folder), and that the refill
// measurement copies the bytes it times.
#include "tools/bench/host_memory.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include "tests/tools/tool_test_util.h"

namespace kvtier::bench {
namespace {

void AddDevice(const std::filesystem::path& root, const std::string& name, const std::string& id,
               const std::string& features) {
  std::filesystem::create_directories(root / name);
  std::ofstream(root / name / "device") << id << "\n";
  std::ofstream(root / name / "features") << features << "\n";
}

// Feature strings as sysfs prints them: bit 0 first, 64 characters.
std::string Features(std::initializer_list<size_t> bits) {
  std::string s(64, '0');
  for (size_t b : bits) s[b] = '1';
  return s;
}

TEST(HostMemory, ABalloonWithFreePageReportingIsFound) {
  kvtier::testing::TempDir tmp;
  const std::filesystem::path root = tmp.path();
  AddDevice(root, "virtio0", "0x0002", Features({5, 32}));  // a block device, bit 5 its own
  EXPECT_FALSE(BalloonReportsFreeMemory(root));
  AddDevice(root, "virtio1", "0x0005", Features({1, 2, 32}));  // a balloon that does not report
  EXPECT_FALSE(BalloonReportsFreeMemory(root));
  AddDevice(root, "virtio2", "0x0005", Features({1, 2, 5, 32}));
  EXPECT_TRUE(BalloonReportsFreeMemory(root));
}

TEST(HostMemory, NoDevicesOrUnreadableOnesReportNothing) {
  kvtier::testing::TempDir tmp;
  EXPECT_FALSE(BalloonReportsFreeMemory(tmp.path() + "/none"));
  const std::filesystem::path root = tmp.path();
  std::filesystem::create_directories(root / "virtio0");  // no files in it
  EXPECT_FALSE(BalloonReportsFreeMemory(root));
  AddDevice(root, "virtio1", "0x0005", "0110");  // too short to hold bit 5
  EXPECT_FALSE(BalloonReportsFreeMemory(root));
}

TEST(HostMemory, RefillTimesBothCopies) {
  std::vector<uint8_t> src(size_t{4} << 20, 0x5a);
  const RefillCost cost = MeasureRefill(src.data(), src.size(), std::chrono::milliseconds(0));
  EXPECT_GT(cost.fresh_gbs, 0);
  EXPECT_GT(cost.later_gbs, 0);
  EXPECT_GT(cost.populate_gbs, 0);  // Linux 5.14 or newer, as the build machines run
  EXPECT_GT(cost.first_use_us, 0);
  EXPECT_GT(cost.second_use_us, 0);
  EXPECT_EQ(MeasureRefill(src.data(), 0, std::chrono::milliseconds(0)).fresh_gbs, 0);
}

}  // namespace
}  // namespace kvtier::bench
