// KVTIER_NUMA_NODE: which NUMA node the host memory kvtier allocates itself
// is placed on: the memfds behind the host tier, the staging pages and the
// simulated GPU, and the disk tier's I/O buffers (bounce and restore
// buffers). `auto` is the node that serves the data: the GPU's (the driver's
// CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID) on the CUDA backend, the engine thread's
// (the CPU it runs on at start) on the host backend and the simulated GPU.
//
// One node per process, set at start before any of that memory exists and
// read by every allocation after it; the engine's own memory, and the
// managed memory of the CUDA backend (the driver places that), are left
// alone. Placement prefers the node (MPOL_PREFERRED), so a full node spills
// to the others instead of failing an allocation; a kernel that refuses the
// binding gets one warning, and the memory goes where the kernel puts it.
//
// Thread-safety: every function may be called from any thread.
#pragma once

#include <cstddef>
#include <string_view>

#include "runtime/status.h"

namespace kvtier {

// What KVTIER_NUMA_NODE asks for.
struct NumaRequest {
  enum class Kind { kAuto, kNode, kOff };
  Kind kind = Kind::kAuto;
  int node = -1;  // kNode only
};

// "auto", "off" or a node number (0..1023); anything else is an error that
// names the accepted forms.
Result<NumaRequest> ParseNumaRequest(std::string_view text);

// The node a request comes to, given the node `automatic` would pick (-1:
// none known): -1 means no placement. auto places nothing on a machine of
// one node. A node this process may not allocate on, or a kernel without
// NUMA support, is a warning and no placement.
int ResolveNumaNode(const NumaRequest& request, int automatic);

// The node of the CPU this thread runs on; -1 without NUMA support.
int NodeOfThisThread();

// The process's node (-1: none, the default): what PlaceOnMemoryNode uses.
void SetMemoryNode(int node);
int MemoryNode();

// Prefers the process's node for the whole pages of [addr, addr + len),
// moving those already there. Nothing when no node is set.
void PlaceOnMemoryNode(void* addr, size_t len);

}  // namespace kvtier
