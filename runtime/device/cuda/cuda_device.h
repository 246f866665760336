// The CUDA backend's entry point (implementation in cuda_device.cc, compiled
// wherever the CUDA toolkit exists; it reaches libcudart, libcuda and libcupti
// through dlopen, so libkvtier.so loads on machines without them).
#pragma once

#include <functional>
#include <memory>

#include "runtime/counters.h"
#include "runtime/device/device.h"
#include "runtime/options.h"
#include "runtime/status.h"

namespace kvtier {

class SpillStore;

// Makes the CUDA device backend, starting on the current GPU, or fails (with a
// message saying why) when no CUDA driver or device answers. Never asks UVM
// to oversubscribe a card: each GPU's budget is its KVTIER_DEVICE_BUDGET, or
// 90% of the memory it has free at first use when that is 0, and never more
// than what is free.
// `open_store` opens the disk tier (null: none; the store must outlive the
// device); it is called once a GPU has answered, so a machine without one
// never creates a spill file.
using StoreOpener = std::function<SpillStore*()>;
Result<std::unique_ptr<Device>> MakeCudaDevice(const Options& options, DeviceEvents* events,
                                               Counters* counters,
                                               const StoreOpener& open_store = nullptr);

namespace cuda {
struct DriverApi;
}
// The same on a driver already loaded (tests hand in a fake one). A failure
// releases whatever it retained.
Result<std::unique_ptr<Device>> MakeCudaDeviceOn(const cuda::DriverApi& api, const Options& options,
                                                 DeviceEvents* events, Counters* counters,
                                                 const StoreOpener& open_store = nullptr);

}  // namespace kvtier
