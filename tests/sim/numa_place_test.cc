// KVTIER_NUMA_NODE: the option's forms, how a request resolves on this
// machine, and that kvtier's own host memory (the I/O buffers, the memfds
// behind the host tier and the simulated GPU) is placed on the node, read
// back with get_mempolicy and move_pages. On a machine of one node only
// node 0 can be checked; auto places nothing there by design.
#include "runtime/numa_place.h"

#include <gtest/gtest.h>
#include <numa.h>
#include <numaif.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "runtime/device/memfd/uffd.h"
#include "runtime/options.h"
#include "runtime/runtime.h"
#include "runtime/storage/env.h"
#include "start/bootstrap.h"
#include "tests/sim/sim_test_util.h"

namespace kvtier::testing {
namespace {

constexpr unsigned long kMaskNodes = 1024;

// The policy that governs `addr` (MPOL_F_ADDR), and its node mask's first word.
struct Policy {
  int mode = -1;
  unsigned long first_nodes = 0;
};
Policy PolicyAt(const void* addr) {
  Policy p;
  unsigned long mask[kMaskNodes / (8 * sizeof(unsigned long))] = {};
  EXPECT_EQ(get_mempolicy(&p.mode, mask, kMaskNodes + 1, const_cast<void*>(addr), MPOL_F_ADDR), 0)
      << strerror(errno);
  p.first_nodes = mask[0];
  return p;
}

// The node each 4 KiB page of [addr, addr + len) is on (they must be present).
std::vector<int> NodesOf(const void* addr, size_t len) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<void*> pages;
  for (size_t off = 0; off < len; off += page) {
    pages.push_back(const_cast<char*>(static_cast<const char*>(addr)) + off);
  }
  std::vector<int> status(pages.size(), -1);
  EXPECT_EQ(move_pages(0, pages.size(), pages.data(), nullptr, status.data(), 0), 0)
      << strerror(errno);
  return status;
}

// Restores the process's node when a test ends, whatever it set.
class NumaPlaceTest : public ::testing::Test {
 protected:
  void TearDown() override { SetMemoryNode(-1); }
};

TEST(NumaRequest, ParsesAutoOffAndNodeNumbers) {
  EXPECT_EQ(ParseNumaRequest("auto").value().kind, NumaRequest::Kind::kAuto);
  EXPECT_EQ(ParseNumaRequest("off").value().kind, NumaRequest::Kind::kOff);
  Result<NumaRequest> three = ParseNumaRequest("3");
  ASSERT_TRUE(three.ok());
  EXPECT_EQ(three.value().kind, NumaRequest::Kind::kNode);
  EXPECT_EQ(three.value().node, 3);
  EXPECT_EQ(ParseNumaRequest("1023").value().node, 1023);
  for (const char* bad : {"", "-1", "1024", "0x1", "1.5", "node0", "Auto", " 0", "0 "}) {
    SCOPED_TRACE(bad);
    Result<NumaRequest> r = ParseNumaRequest(bad);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("auto, off or a node number"), std::string::npos);
  }
}

TEST(NumaRequest, ABadValueIsAnOptionErrorThatNamesTheVariable) {
  const std::map<std::string, std::string> env = {{"KVTIER_NUMA_NODE", "west"}};
  Result<Options> o = ParseOptions([&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("KVTIER_NUMA_NODE=west"), std::string::npos)
      << o.status().message();
  EXPECT_NE(o.status().message().find("accepted: auto, off"), std::string::npos);
}

TEST(NumaRequest, ResolvesOnThisMachine) {
  ASSERT_GE(numa_available(), 0) << "no NUMA support in this kernel";
  const NumaRequest off{NumaRequest::Kind::kOff, -1};
  const NumaRequest automatic{NumaRequest::Kind::kAuto, -1};
  const NumaRequest zero{NumaRequest::Kind::kNode, 0};
  const NumaRequest missing{NumaRequest::Kind::kNode, numa_max_node() + 1};
  EXPECT_EQ(ResolveNumaNode(off, 0), -1);
  EXPECT_EQ(ResolveNumaNode(zero, -1), 0);
  EXPECT_EQ(ResolveNumaNode(missing, 0), -1);  // a warning, not an error
  EXPECT_EQ(ResolveNumaNode(automatic, -1), -1);
  // auto chooses only where there is a choice.
  EXPECT_EQ(ResolveNumaNode(automatic, 0), numa_max_node() > 0 ? 0 : -1);
  const int here = NodeOfThisThread();
  EXPECT_GE(here, 0);
  EXPECT_LE(here, numa_max_node());
}

TEST_F(NumaPlaceTest, IoBuffersArePlacedOnTheNodeAndLeftAloneWithout) {
  SetMemoryNode(0);
  for (size_t bytes : {size_t{4096}, size_t{64} << 10, size_t{2} << 20}) {
    SCOPED_TRACE(bytes);
    Result<AlignedBuffer> b = AlignedBuffer::Allocate(bytes);
    ASSERT_TRUE(b.ok()) << b.status().message();
    ASSERT_TRUE(IsAligned(b.value().data(), bytes >= (size_t{2} << 20) ? bytes : 4096));
    const Policy p = PolicyAt(b.value().data());
    EXPECT_EQ(p.mode, MPOL_PREFERRED);
    EXPECT_EQ(p.first_nodes, 1UL);
    for (int node : NodesOf(b.value().data(), b.value().size())) EXPECT_EQ(node, 0);
    EXPECT_EQ(b.value().data()[bytes - 1], 0);  // zero-filled
  }
  SetMemoryNode(-1);
  Result<AlignedBuffer> plain = AlignedBuffer::Allocate(64 << 10);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(PolicyAt(plain.value().data()).mode, MPOL_DEFAULT);
}

TEST_F(NumaPlaceTest, AMemfdsPagesFollowTheNodeThroughEitherView) {
  SetMemoryNode(0);
  Result<ShmViews> made = ShmViews::Create(size_t{1} << 20, size_t{64} << 10, "kvtier-numa-test");
  ASSERT_TRUE(made.ok()) << made.status().message();
  ShmViews v = made.value();
  EXPECT_EQ(PolicyAt(v.engine).mode, MPOL_PREFERRED);
  EXPECT_EQ(PolicyAt(v.alias).mode, MPOL_PREFERRED);  // the memfd's own policy
  memset(v.alias, 1, v.bytes / 2);                    // faulted in through the alias
  memset(v.engine + v.bytes / 2, 2, v.bytes / 2);     // and through the engine's view
  // move_pages reads a view's own page table: each half through its view.
  for (int node : NodesOf(v.alias, v.bytes / 2)) EXPECT_EQ(node, 0);
  for (int node : NodesOf(v.engine + v.bytes / 2, v.bytes / 2)) EXPECT_EQ(node, 0);
  v.Release();
}

using NumaRuntimeTest = SimDeviceTest;  // its SetUp skips without userfaultfd

TEST_F(NumaRuntimeTest, TheRuntimeSetsTheNodeBeforeItsDeviceMakesRegions) {
  for (const char* value : {"0", "off"}) {
    SCOPED_TRACE(value);
    const std::map<std::string, std::string> env = {{"KVTIER_NUMA_NODE", value},
                                                    {"KVTIER_DEVICE_BUDGET", "1M"},
                                                    {"KVTIER_HOST_BUDGET", "16M"},
                                                    {"KVTIER_STATS", "0"}};
    Result<Options> o = ParseOptions([&](const char* name) -> const char* {
      auto it = env.find(name);
      return it == env.end() ? nullptr : it->second.c_str();
    });
    ASSERT_TRUE(o.ok()) << o.status().message();
    Result<std::unique_ptr<Runtime>> rt = Runtime::Create(o.value(), SimParts());
    ASSERT_TRUE(rt.ok()) << rt.status().message();
    const bool placed = std::string(value) == "0";
    EXPECT_EQ(MemoryNode(), placed ? 0 : -1);
    Result<RegionPtr> region =
        rt.value()->device().CreateRegion(1, size_t{1} << 20, 64 << 10, "kv");
    ASSERT_TRUE(region.ok()) << region.status().message();
    EXPECT_EQ(PolicyAt(reinterpret_cast<void*>(region.value()->base)).mode,
              placed ? MPOL_PREFERRED : MPOL_DEFAULT);
    rt.value()->device().DestroyRegion(*region.value());
  }
  SetMemoryNode(-1);
}

}  // namespace
}  // namespace kvtier::testing
