// UvmRegion: the CUDA backend's state of one region (Region::backend points
// here), shared by uvm_device.cc and uvm_evidence.cc.
// Thread-safety: `links` and the page tiers change only under the device's
// mutex; the rest is immutable after creation.
#pragma once

#include <memory>

#include "runtime/device/cuda/uvm_device.h"

namespace kvtier::cuda {

struct UvmRegion {
  RegionPtr region;                          // held until DestroyRegion
  CUdevice device;                           // where its pages are promoted to
  std::unique_ptr<UvmDevice::Link[]> links;  // one per page
};

}  // namespace kvtier::cuda
