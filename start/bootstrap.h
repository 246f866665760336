// The process's start-up (bootstrap.cc): the one place that makes a
// runtime's parts, the device KVTIER_BACKEND names and the registry's
// policies. The runtime knows devices and policies only through the
// factories of Runtime::Parts; tests make their parts here too.
#pragma once

#include <cstdint>

#include "runtime/options.h"
#include "runtime/runtime.h"
#include "runtime/status.h"

namespace kvtier {

class VaRange;

// What the data-backed device (runtime/device/memfd/memfd_device.h) is made as:
// the simulated GPU of KVTIER_BACKEND=sim, or the host backend's resident
// memory and staging.
struct DataDeviceShape {
  Backend backend = Backend::kSim;
  // Where it places engine views; null: anywhere.
  VaRange* range = nullptr;
  // The most bytes its host tier holds before a fault waits for spills (0:
  // no limit; the host backend's staging).
  uint64_t host_limit = 0;
  // Never-touched pages a first touch populates after its own (0: none).
  uint32_t fill_ahead = 0;
};

// Makes the data-backed device: the first KVTIER_DEVICE_BUDGET as its
// capacity, KVTIER_SIM_FAULT_THREADS fault threads, and the disk tier when
// the runtime has one.
Runtime::DeviceFactory DataDeviceFactory(DataDeviceShape shape);

// The parts of KVTIER_BACKEND=sim: the registry's policies and the
// simulated GPU (a data-backed device, Backend::kSim).
Runtime::Parts SimParts();

// How the host backend divides a budget: an eighth (whole pages, one at
// least) stages pages on their way to SSD, the rest is resident memory.
HostShares SplitHostBudget(uint64_t budget, uint64_t page);

// What KVTIER_BACKEND=host changes in the options and parts: the budget
// (KVTIER_HOST_BUDGET, capped to the memory wall; unset, the room the wall
// leaves, followed while the process runs: parts->follow_wall, read where
// parts->wall_env and wall_root say) split by SplitHostBudget; the device a
// data-backed one, Backend::kHost, with fill-ahead, its engine views in
// `range` (null: anywhere); lru for KVTIER_POLICY=auto. The other parts stay
// as they were. Fails when the budget is too small for the page size.
Status HostBackendParts(const Options& options, VaRange* range, Options* effective,
                        Runtime::Parts* parts);

}  // namespace kvtier
