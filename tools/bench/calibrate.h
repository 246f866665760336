// Internal to `kvtier-bench calibrate` (calibrate_bench.cc, calibrate_gpu.cc):
// the GPU figures it measures through the CUDA driver, where one answers.
// Thread-safety: single-threaded tool.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvtier::bench {

struct GpuFigures {
  bool measured = false;
  std::string note;    // what was measured, or why nothing was
  std::string device;  // "GPU 0 (NVIDIA H200)"
  double memory_bytes = 0;
  double prefetch_bps = 0;  // managed memory, host to device, one call for the buffer
  uint64_t prefetch_bytes = 0;
  // Each of the rest is 0 where it could not be measured (`skipped` says why).
  double prefetch_2m_bps = 0;     // one cuMemPrefetchAsync per 2 MiB
  double prefetch_64k_bps = 0;    // one cuMemPrefetchAsync per 64 KiB
  double prefetch_batch_bps = 0;  // every other 64 KiB of the buffer, one batch call
  bool batch_call = false;        // the driver has cuMemPrefetchBatchAsync
  double pinned_copy_bps = 0;     // cuMemcpyHtoDAsync from pinned host memory
  double fault_bps = 0;           // a kernel touching every 64 KiB of a host-resident buffer
  double fault_latency_ns = 0;    // one fault: a one-thread touch minus the same on the device
  double decode_alone_ms = 0;     // a kernel reading 256 MiB of device memory
  double decode_beside_ms = 0;    // the same while prefetches run on another stream
  std::vector<std::string> skipped;
};

// Device 0 through the driver API (the CUDA backend's DriverApi and the
// kernels of gpu_kernels.h): total memory, prefetch bandwidth of a managed
// buffer of `bytes` (at most a quarter of the free memory) in one call, per
// 2 MiB, per 64 KiB and as one batch of scattered 64 KiB ranges, a copy
// from pinned memory, fault-driven migration and the latency of one fault,
// and how much a kernel that reads memory as a decode step does slows while
// prefetches run beside it. Builds without CUDA, and machines without a
// driver or device, return measured = false and say why.
GpuFigures MeasureGpu(uint64_t bytes);

}  // namespace kvtier::bench
