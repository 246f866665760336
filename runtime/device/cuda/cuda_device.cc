// MakeCudaDevice (cuda_device.h): finds the driver and the device, sizes the
// budget and starts the UVM backend (uvm_device.h).
//
// The first GPU is the one whose context is current on the calling thread
// (the engine chose it with cudaSetDevice before its first allocation), else
// ordinal 0; the backend sizes it (and every other GPU at its first use). Every failure says why in
// one line; the runtime then passes every call through, so a machine without a GPU behaves as
// without kvtier. Thread-safety: the runtime calls it once, under its start-up lock.
#include "runtime/device/cuda/cuda_device.h"

#include <algorithm>

#include "runtime/device/cuda/driver_api.h"
#include "runtime/device/cuda/uvm_device.h"
#include "runtime/log.h"
#include "runtime/numa_place.h"
#include "runtime/units.h"

namespace kvtier {

Result<std::unique_ptr<Device>> MakeCudaDevice(const Options& options, DeviceEvents* events,
                                               Counters* counters, const StoreOpener& open_store) {
  Result<cuda::DriverApi> loaded = cuda::DriverApi::Load();
  if (!loaded.ok()) return loaded.status();
  return MakeCudaDeviceOn(loaded.value(), options, events, counters, open_store);
}

Result<std::unique_ptr<Device>> MakeCudaDeviceOn(const cuda::DriverApi& api, const Options& options,
                                                 DeviceEvents* events, Counters* counters,
                                                 const StoreOpener& open_store) {
  CUresult r = api.cuInit(0);
  if (r != CUDA_SUCCESS) {
    return Status::Errorf("no usable GPU: cuInit failed with %s", api.ErrorName(r));
  }
  int count = 0;
  if (api.cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0) {
    return Status::Error("no usable GPU: the CUDA driver sees no device");
  }
  CUdevice device = 0;
  if (api.cuCtxGetDevice(&device) != CUDA_SUCCESS &&
      (r = api.cuDeviceGet(&device, 0)) != CUDA_SUCCESS) {
    return Status::Errorf("no usable GPU: cuDeviceGet(0) failed with %s", api.ErrorName(r));
  }
  // An attribute the driver cannot report counts as absent.
  int managed = 0, concurrent = 0;
  if (api.cuDeviceGetAttribute(&managed, CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, device) !=
      CUDA_SUCCESS) {
    managed = 0;
  }
  if (api.cuDeviceGetAttribute(&concurrent, CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS,
                               device) != CUDA_SUCCESS) {
    concurrent = 0;
  }
  if (!managed || !concurrent) {
    return Status::Errorf(
        "GPU %d has no concurrent managed memory access (prefetch and advice need a Pascal or "
        "newer GPU on Linux, not under MPS or vGPU without unified memory)",
        static_cast<int>(device));
  }
  CUcontext context = nullptr;
  if ((r = api.cuDevicePrimaryCtxRetain(&context, device)) != CUDA_SUCCESS) {
    return Status::Errorf("GPU %d: cannot retain its primary context (%s)",
                          static_cast<int>(device), api.ErrorName(r));
  }
  cuda::UvmDeviceConfig config;
  config.api = api;
  config.device = device;
  config.context = context;
  config.budget = options.device_budget;
  config.page_size = options.page_size;
  config.events = events;
  config.counters = counters;
  config.maintenance_ms = static_cast<int>(std::clamp<int64_t>(options.tick_ms, 5, 100));
  // kvtier's own host memory (the disk tier's buffers) on the GPU's node
  // rather than the engine thread's, before the store allocates any.
  if (Result<NumaRequest> numa = ParseNumaRequest(options.numa_node);
      numa.ok() && numa.value().kind == NumaRequest::Kind::kAuto) {
    int node = -1;
    if (api.cuDeviceGetAttribute(&node, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, device) != CUDA_SUCCESS) {
      node = -1;
    }
    if (node >= 0) SetMemoryNode(ResolveNumaNode(numa.value(), node));
  }
  config.store = open_store ? open_store() : nullptr;
  config.idle_ns = static_cast<uint64_t>(options.idle_ms) * 1'000'000;
  auto made = cuda::UvmDevice::Create(std::move(config));
  if (!made.ok()) {
    api.cuDevicePrimaryCtxRelease(device);
    return made.status();
  }
  return std::unique_ptr<Device>(std::move(made).value());
}

}  // namespace kvtier
