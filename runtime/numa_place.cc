// KVTIER_NUMA_NODE's parsing and the placement of kvtier's own host memory
// (see numa_place.h). Only libnuma's queries and the raw mbind call are used:
// libnuma's numa_warn/numa_error are the engine's to override, so nothing
// here may make libnuma print.
#include "runtime/numa_place.h"

#include <numa.h>
#include <numaif.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstring>

#include "runtime/log.h"

namespace kvtier {
namespace {

constexpr int kMaxNodes = 1024;  // nodes a mask here can name
constexpr unsigned long kMaskBits = 8 * sizeof(unsigned long);

std::atomic<int> g_node{-1};

bool NumaKnown() {
  static const bool known = numa_available() >= 0;
  return known;
}

}  // namespace

Result<NumaRequest> ParseNumaRequest(std::string_view text) {
  NumaRequest r;
  if (text == "auto") return r;
  if (text == "off") {
    r.kind = NumaRequest::Kind::kOff;
    return r;
  }
  int node = -1;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), node);
  if (ec != std::errc() || end != text.data() + text.size() || node < 0 || node >= kMaxNodes) {
    return Status::Error("not auto, off or a node number from 0 to 1023");
  }
  r.kind = NumaRequest::Kind::kNode;
  r.node = node;
  return r;
}

int ResolveNumaNode(const NumaRequest& request, int automatic) {
  if (request.kind == NumaRequest::Kind::kOff) return -1;
  const int node = request.kind == NumaRequest::Kind::kNode ? request.node : automatic;
  if (node < 0) return -1;
  // auto places nothing where there is nothing to choose.
  if (request.kind == NumaRequest::Kind::kAuto && (!NumaKnown() || numa_max_node() == 0)) {
    return -1;
  }
  if (!NumaKnown()) {
    Log(0, "KVTIER_NUMA_NODE=%d: this kernel has no NUMA support; memory is not placed", node);
    return -1;
  }
  if (node > numa_max_node() ||
      !numa_bitmask_isbitset(numa_all_nodes_ptr, static_cast<unsigned>(node))) {
    Log(0,
        "KVTIER_NUMA_NODE: node %d is not one this process may allocate on (nodes 0..%d); "
        "memory is not placed (set KVTIER_NUMA_NODE to one of them, or off)",
        node, numa_max_node());
    return -1;
  }
  return node;
}

int NodeOfThisThread() {
  if (!NumaKnown()) return -1;
  const int cpu = sched_getcpu();
  return cpu < 0 ? -1 : numa_node_of_cpu(cpu);
}

void SetMemoryNode(int node) { g_node.store(node < kMaxNodes ? node : -1); }

int MemoryNode() { return g_node.load(std::memory_order_relaxed); }

void PlaceOnMemoryNode(void* addr, size_t len) {
  const int node = MemoryNode();
  if (node < 0 || addr == nullptr || len == 0) return;
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(addr) + page - 1) & ~(page - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(addr) + len) & ~(page - 1);
  if (end <= begin) return;
  unsigned long mask[kMaxNodes / kMaskBits] = {};
  mask[static_cast<unsigned long>(node) / kMaskBits] |=
      1UL << (static_cast<unsigned long>(node) % kMaskBits);
  // maxnode counts one more than the mask's bits (the kernel reads one less).
  if (mbind(reinterpret_cast<void*>(begin), end - begin, MPOL_PREFERRED, mask, kMaxNodes + 1,
            MPOL_MF_MOVE) != 0) {
    static std::atomic<bool> warned{false};
    WarnOnce(&warned,
             "KVTIER_NUMA_NODE: the kernel refused to place kvtier's memory on node %d (mbind: "
             "%s); it stays where the kernel puts it",
             node, strerror(errno));
  }
}

}  // namespace kvtier
