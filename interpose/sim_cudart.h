// SimCudaRuntime: the simulated CUDA runtime behind the runtime API hooks
// (KVTIER_BACKEND=sim). Not the simulated GPU that backs tiered regions with
// userfaultfd (runtime/device/memfd): this one answers the CUDA calls themselves.
//
// One device (ordinal 0) whose memory is host memory: plain allocations are
// 256-byte-aligned heap blocks (1 MiB and up: anonymous mappings, committed
// only where touched) counted against the device's total memory;
// tiered regions come from the runtime and are not kept here. Streams and
// events are fake handles (never dereferenced) and all work is synchronous:
// an event records the time at cudaEventRecord. The device reports its name
// and memory from KVTIER_SIM_DEVICE_NAME / KVTIER_SIM_DEVICE_MEMORY and
// H100-like values for the rest.
// Thread-safety: every method is safe from any thread; the handle maps share
// one mutex, plain memory has its own (PlainAllocations).
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>

#include "interpose/cuda_api.h"
#include "interpose/plain_allocations.h"
#include "runtime/mutex.h"

namespace kvtier::interpose {

class SimCudaRuntime {
 public:
  SimCudaRuntime(std::string name, uint64_t total_bytes);
  SimCudaRuntime(const SimCudaRuntime&) = delete;
  SimCudaRuntime& operator=(const SimCudaRuntime&) = delete;

  const std::string& name() const { return name_; }
  uint64_t total_bytes() const { return total_bytes_; }

  // Plain device memory. `reserved` is device memory already promised to
  // tiered regions; an allocation that does not fit in total - reserved
  // fails with cudaErrorMemoryAllocation.
  cudaError_t Alloc(size_t bytes, uint64_t reserved, void** out);
  // Frees a plain allocation; returns its size, 0 when `ptr` is not one.
  size_t Free(void* ptr);
  const PlainAllocations& memory() const { return memory_; }

  // Streams: nullptr, cudaStreamLegacy and cudaStreamPerThread always exist.
  cudaError_t CreateStream(unsigned flags, int priority, cudaStream_t* out);
  cudaError_t DestroyStream(cudaStream_t stream);
  bool ValidStream(cudaStream_t stream) const;

  cudaError_t CreateEvent(unsigned flags, cudaEvent_t* out);
  cudaError_t DestroyEvent(cudaEvent_t event);
  cudaError_t RecordEvent(cudaEvent_t event, cudaStream_t stream, uint64_t now_ns);
  cudaError_t CheckEvent(cudaEvent_t event) const;  // cudaEventQuery/Synchronize
  cudaError_t ElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) const;

  void Properties(cudaDeviceProp* prop) const;
  cudaError_t Attribute(int attr, int* value) const;  // a cudaDeviceAttr value

  // fork: prepare locks both mutexes; parent and child unlock them. Not
  // checked: the analysis cannot name memory_'s lock, which is private.
  void LockForFork() NO_THREAD_SAFETY_ANALYSIS;
  void UnlockAfterFork() NO_THREAD_SAFETY_ANALYSIS;

 private:
  struct Stream {
    unsigned flags;
    int priority;
  };
  struct Event {
    unsigned flags;
    bool recorded;
    uint64_t time_ns;
  };

  const std::string name_;
  const uint64_t total_bytes_;
  PlainAllocations memory_;

  mutable Mutex mu_;
  uintptr_t next_handle_ GUARDED_BY(mu_);
  std::unordered_map<uintptr_t, Stream> streams_ GUARDED_BY(mu_);
  std::unordered_map<uintptr_t, Event> events_ GUARDED_BY(mu_);
};

}  // namespace kvtier::interpose
