// UvmRegion: the CUDA backend's state of one region (Region::backend points
// here), shared by uvm_device.cc and uvm_evidence.cc.
// Thread-safety: `links`, `disk_io`, `releasing` and the page tiers change
// only under the device's mutex; the rest is immutable after creation.
#pragma once

#include <cstdint>
#include <memory>

#include "runtime/device/cuda/uvm_device.h"

namespace kvtier::cuda {

struct UvmRegion {
  RegionPtr region;                          // held until DestroyRegion
  CUdevice device;                           // where its pages are promoted to
  std::unique_ptr<UvmDevice::Link[]> links;  // one per page
  int disk_io = 0;                           // its pages being spilled or restored (device's mutex)
  bool releasing = false;  // DestroyRegion waits for disk_io to end (device's mutex)
};

// A page's disk_slot when it was all zeros: nothing on disk, restored as zeros.
constexpr uint32_t kZeroSlot = UINT32_MAX;

// Makes a GPU's primary context current on this thread for a scope (the
// engine thread may have another one current, the policy thread none).
class ScopedContext {
 public:
  ScopedContext(const DriverApi& api, CUcontext ctx) : api_(api) {
    if (ctx != nullptr) result_ = api_.cuCtxPushCurrent(ctx);
    pushed_ = ctx != nullptr && result_ == CUDA_SUCCESS;
  }
  ~ScopedContext() {
    CUcontext popped;
    if (pushed_) api_.cuCtxPopCurrent(&popped);
  }
  ScopedContext(const ScopedContext&) = delete;
  ScopedContext& operator=(const ScopedContext&) = delete;
  // CUDA_SUCCESS when the context is current (or none was asked for).
  CUresult result() const { return result_; }

 private:
  const DriverApi& api_;
  bool pushed_ = false;
  CUresult result_ = CUDA_SUCCESS;
};

// Depth of the backend's own calls on this thread: the driver calls it
// makes there are kvtier's, not the engine's, and the submit gate lets them
// pass (an engine thread restoring pages in the gate must not re-enter it).
[[gnu::tls_model("initial-exec")]] constinit inline thread_local int t_backend_depth = 0;

class BackendScope {
 public:
  BackendScope() { ++t_backend_depth; }
  ~BackendScope() { --t_backend_depth; }
  BackendScope(const BackendScope&) = delete;
  BackendScope& operator=(const BackendScope&) = delete;
};

}  // namespace kvtier::cuda
