// MakeCudaDevice (cuda_device.h): finds the driver and the device, sizes the
// budget and starts the UVM backend (uvm_device.h).
//
// The device is the one whose context is current on the calling thread (the
// engine chose it with cudaSetDevice before its first allocation), else
// ordinal 0. Every failure says why in one line; the runtime then passes
// every call through, so a machine without a GPU behaves as without kvtier.
// Thread-safety: the runtime calls it once, under its start-up lock.
#include "runtime/device/cuda/cuda_device.h"

#include <algorithm>

#include "runtime/device/cuda/driver_api.h"
#include "runtime/device/cuda/uvm_device.h"
#include "runtime/log.h"
#include "runtime/units.h"

namespace kvtier {

Result<std::unique_ptr<Device>> MakeCudaDevice(const Options& options, DeviceEvents* events,
                                               Counters* counters) {
  Result<cuda::DriverApi> loaded = cuda::DriverApi::Load();
  if (!loaded.ok()) return loaded.status();
  return MakeCudaDeviceOn(loaded.value(), options, events, counters);
}

Result<std::unique_ptr<Device>> MakeCudaDeviceOn(const cuda::DriverApi& api, const Options& options,
                                                 DeviceEvents* events, Counters* counters) {
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
  size_t free_bytes = 0, total = 0;
  if ((r = api.cuCtxPushCurrent(context)) == CUDA_SUCCESS) {
    r = api.cuMemGetInfo(&free_bytes, &total);
    CUcontext popped;
    api.cuCtxPopCurrent(&popped);
  }
  if (r != CUDA_SUCCESS || free_bytes == 0) {
    api.cuDevicePrimaryCtxRelease(device);
    return Status::Errorf("GPU %d: cannot read its free memory (%s)", static_cast<int>(device),
                          api.ErrorName(r));
  }

  uint64_t capacity = options.device_budget ? options.device_budget : free_bytes / 10 * 9;
  if (capacity > free_bytes) {
    Log(0, "KVTIER_DEVICE_BUDGET=%s is more than the %s free on GPU %d at start; using %s",
        FormatBytes(options.device_budget).c_str(), FormatBytes(free_bytes).c_str(),
        static_cast<int>(device), FormatBytes(free_bytes).c_str());
    capacity = free_bytes;
  }
  capacity = capacity / options.page_size * options.page_size;
  if (capacity == 0) {
    api.cuDevicePrimaryCtxRelease(device);
    return Status::Errorf("GPU %d: a device budget of less than one page (%s free)",
                          static_cast<int>(device), FormatBytes(free_bytes).c_str());
  }

  cuda::UvmDeviceConfig config;
  config.api = api;
  config.device = device;
  config.context = context;
  config.capacity_bytes = capacity;
  config.events = events;
  config.counters = counters;
  config.maintenance_ms = static_cast<int>(std::clamp<int64_t>(options.tick_ms, 5, 100));
  auto made = cuda::UvmDevice::Create(std::move(config));
  if (!made.ok()) {
    api.cuDevicePrimaryCtxRelease(device);
    return made.status();
  }
  Log(1, "CUDA backend on GPU %d: %s free of %s at start, device budget %s",
      static_cast<int>(device), FormatBytes(free_bytes).c_str(), FormatBytes(total).c_str(),
      FormatBytes(capacity).c_str());
  return std::unique_ptr<Device>(std::move(made).value());
}

}  // namespace kvtier
