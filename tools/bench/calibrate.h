// Internal to `kvtier-bench calibrate` (calibrate_bench.cc, calibrate_gpu.cc):
// the GPU figures it measures through the CUDA driver, where one answers.
// Thread-safety: single-threaded tool.
#pragma once

#include <cstdint>
#include <string>

namespace kvtier::bench {

struct GpuFigures {
  bool measured = false;
  std::string note;    // what was measured, or why nothing was
  std::string device;  // "GPU 0 (NVIDIA H200)"
  double memory_bytes = 0;
  double prefetch_bps = 0;  // managed memory, host to device
  uint64_t prefetch_bytes = 0;
};

// Device 0 through the driver API (the CUDA backend's DriverApi): total
// memory, and the median of three prefetches of a managed buffer of
// `bytes` (at most a quarter of the free memory) from the host to the
// device. Builds without CUDA, and machines without a driver or device,
// return measured = false and say why.
GpuFigures MeasureGpu(uint64_t bytes);

}  // namespace kvtier::bench
