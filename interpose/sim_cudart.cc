// SimCudaRuntime: see sim_cudart.h.
#include "interpose/sim_cudart.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>

namespace kvtier::interpose {
namespace {

constexpr size_t kAlignment = 256;  // cudaMalloc's guarantee
// Blocks from this size up are mapped directly (page-aligned, so aligned
// enough): an engine's weights on an 80 GB simulated device are tens of GB
// the program never touches, which must cost neither committed memory nor
// the heap's (or a sanitizer's) per-byte bookkeeping.
constexpr size_t kMapThreshold = size_t{1} << 20;
// Fake handles live far from anything mapped and from the special stream
// values 0, 1 and 2; nobody dereferences them.
constexpr uintptr_t kFirstHandle = uintptr_t{0x7e57} << 32;
constexpr uintptr_t kHandleStep = 16;

constexpr unsigned kEventFlags =
    cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;

bool SpecialStream(cudaStream_t s) {
  return s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread;
}

}  // namespace

SimCudaRuntime::SimCudaRuntime(std::string name, uint64_t total_bytes)
    : name_(std::move(name)), total_bytes_(total_bytes), next_handle_(kFirstHandle) {}

cudaError_t SimCudaRuntime::Alloc(size_t bytes, uint64_t reserved, void** out) {
  uint64_t limit = reserved < total_bytes_ ? total_bytes_ - reserved : 0;
  if (!memory_.Reserve(bytes, limit)) return cudaErrorMemoryAllocation;
  size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* p = nullptr;
  bool ok = rounded >= bytes;
  if (ok && rounded >= kMapThreshold) {
    p = mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
             -1, 0);
    ok = p != MAP_FAILED;
  } else if (ok) {
    ok = posix_memalign(&p, kAlignment, rounded) == 0;
  }
  if (!ok) {
    memory_.Unreserve(bytes);
    return cudaErrorMemoryAllocation;
  }
  memory_.Insert(p, bytes);
  *out = p;
  return cudaSuccess;
}

size_t SimCudaRuntime::Free(void* ptr) {
  size_t bytes = memory_.Remove(ptr);
  if (bytes == 0) return 0;
  const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  if (rounded >= kMapThreshold) {
    munmap(ptr, rounded);
  } else {
    free(ptr);
  }
  return bytes;
}

cudaError_t SimCudaRuntime::CreateStream(unsigned flags, int priority, cudaStream_t* out) {
  if (out == nullptr || (flags & ~unsigned{cudaStreamNonBlocking}) != 0)
    return cudaErrorInvalidValue;
  MutexLock lock(&mu_);
  uintptr_t h = next_handle_;
  next_handle_ += kHandleStep;
  streams_[h] = Stream{flags, priority};
  *out = reinterpret_cast<cudaStream_t>(h);
  return cudaSuccess;
}

cudaError_t SimCudaRuntime::DestroyStream(cudaStream_t stream) {
  MutexLock lock(&mu_);
  return streams_.erase(reinterpret_cast<uintptr_t>(stream)) ? cudaSuccess
                                                             : cudaErrorInvalidResourceHandle;
}

bool SimCudaRuntime::ValidStream(cudaStream_t stream) const {
  if (SpecialStream(stream)) return true;
  MutexLock lock(&mu_);
  return streams_.count(reinterpret_cast<uintptr_t>(stream)) != 0;
}

cudaError_t SimCudaRuntime::CreateEvent(unsigned flags, cudaEvent_t* out) {
  if (out == nullptr || (flags & ~kEventFlags) != 0) return cudaErrorInvalidValue;
  // An interprocess event must also disable timing (as in libcudart).
  if ((flags & cudaEventInterprocess) && !(flags & cudaEventDisableTiming))
    return cudaErrorInvalidValue;
  MutexLock lock(&mu_);
  uintptr_t h = next_handle_;
  next_handle_ += kHandleStep;
  events_[h] = Event{flags, false, 0};
  *out = reinterpret_cast<cudaEvent_t>(h);
  return cudaSuccess;
}

cudaError_t SimCudaRuntime::DestroyEvent(cudaEvent_t event) {
  MutexLock lock(&mu_);
  return events_.erase(reinterpret_cast<uintptr_t>(event)) ? cudaSuccess
                                                           : cudaErrorInvalidResourceHandle;
}

cudaError_t SimCudaRuntime::RecordEvent(cudaEvent_t event, cudaStream_t stream, uint64_t now_ns) {
  if (!ValidStream(stream)) return cudaErrorInvalidResourceHandle;
  MutexLock lock(&mu_);
  auto it = events_.find(reinterpret_cast<uintptr_t>(event));
  if (it == events_.end()) return cudaErrorInvalidResourceHandle;
  it->second.recorded = true;
  it->second.time_ns = now_ns;
  return cudaSuccess;
}

cudaError_t SimCudaRuntime::CheckEvent(cudaEvent_t event) const {
  MutexLock lock(&mu_);
  return events_.count(reinterpret_cast<uintptr_t>(event)) ? cudaSuccess
                                                           : cudaErrorInvalidResourceHandle;
}

cudaError_t SimCudaRuntime::ElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) const {
  if (ms == nullptr) return cudaErrorInvalidValue;
  MutexLock lock(&mu_);
  auto a = events_.find(reinterpret_cast<uintptr_t>(start));
  auto b = events_.find(reinterpret_cast<uintptr_t>(end));
  if (a == events_.end() || b == events_.end()) return cudaErrorInvalidResourceHandle;
  // libcudart: never recorded, or created without timing -> invalid handle.
  if (!a->second.recorded || !b->second.recorded) return cudaErrorInvalidResourceHandle;
  if ((a->second.flags | b->second.flags) & cudaEventDisableTiming)
    return cudaErrorInvalidResourceHandle;
  *ms = static_cast<float>(
      (static_cast<double>(b->second.time_ns) - static_cast<double>(a->second.time_ns)) / 1e6);
  return cudaSuccess;
}

void SimCudaRuntime::Properties(cudaDeviceProp* p) const {
  memset(p, 0, sizeof *p);
  strncpy(p->name, name_.c_str(), sizeof p->name - 1);
  memcpy(p->uuid.bytes, "kvtier-sim-gpu-0", sizeof p->uuid.bytes);
  p->totalGlobalMem = total_bytes_;
  p->sharedMemPerBlock = 48 << 10;
  p->regsPerBlock = 65536;
  p->warpSize = 32;
  p->memPitch = 2147483647;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = 1024;
  p->maxThreadsDim[1] = 1024;
  p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 2147483647;
  p->maxGridSize[1] = 65535;
  p->maxGridSize[2] = 65535;
  p->totalConstMem = 64 << 10;
  p->major = 9;
  p->minor = 0;
  p->textureAlignment = 512;
  p->texturePitchAlignment = 32;
  p->multiProcessorCount = 132;
  p->canMapHostMemory = 1;
  p->surfaceAlignment = 512;
  p->concurrentKernels = 1;
  p->ECCEnabled = 1;
  p->asyncEngineCount = 3;
  p->unifiedAddressing = 1;
  p->memoryBusWidth = 5120;
  p->l2CacheSize = 50 << 20;
  p->persistingL2CacheMaxSize = 30 << 20;
  p->maxThreadsPerMultiProcessor = 2048;
  p->streamPrioritiesSupported = 1;
  p->globalL1CacheSupported = 1;
  p->localL1CacheSupported = 1;
  p->sharedMemPerMultiprocessor = 228 << 10;
  p->regsPerMultiprocessor = 65536;
  p->managedMemory = 1;
  p->concurrentManagedAccess = 1;
  p->computePreemptionSupported = 1;
  p->cooperativeLaunch = 1;
  p->sharedMemPerBlockOptin = 227 << 10;
  p->maxBlocksPerMultiProcessor = 32;
  p->accessPolicyMaxWindowSize = 128 << 20;
  p->reservedSharedMemPerBlock = 1 << 10;
  p->hostRegisterSupported = 1;
  p->memoryPoolsSupported = 1;
  p->clusterLaunch = 1;
  p->deviceNumaId = -1;
  p->hostNumaId = -1;
}

cudaError_t SimCudaRuntime::Attribute(int attr, int* value) const {
  if (value == nullptr || attr < 1 || attr >= cudaDevAttrMax) return cudaErrorInvalidValue;
  cudaDeviceProp p;
  Properties(&p);
  int v = 0;  // attributes of features the simulated device lacks
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock:
      v = p.maxThreadsPerBlock;
      break;
    case cudaDevAttrMaxBlockDimX:
      v = p.maxThreadsDim[0];
      break;
    case cudaDevAttrMaxBlockDimY:
      v = p.maxThreadsDim[1];
      break;
    case cudaDevAttrMaxBlockDimZ:
      v = p.maxThreadsDim[2];
      break;
    case cudaDevAttrMaxGridDimX:
      v = p.maxGridSize[0];
      break;
    case cudaDevAttrMaxGridDimY:
      v = p.maxGridSize[1];
      break;
    case cudaDevAttrMaxGridDimZ:
      v = p.maxGridSize[2];
      break;
    case cudaDevAttrMaxSharedMemoryPerBlock:
      v = static_cast<int>(p.sharedMemPerBlock);
      break;
    case cudaDevAttrTotalConstantMemory:
      v = static_cast<int>(p.totalConstMem);
      break;
    case cudaDevAttrWarpSize:
      v = p.warpSize;
      break;
    case cudaDevAttrMaxRegistersPerBlock:
      v = p.regsPerBlock;
      break;
    case cudaDevAttrClockRate:
      v = 1980000;
      break;  // kHz
    case cudaDevAttrMultiProcessorCount:
      v = p.multiProcessorCount;
      break;
    case cudaDevAttrCanMapHostMemory:
      v = p.canMapHostMemory;
      break;
    case cudaDevAttrConcurrentKernels:
      v = p.concurrentKernels;
      break;
    case cudaDevAttrEccEnabled:
      v = p.ECCEnabled;
      break;
    case cudaDevAttrMemoryClockRate:
      v = 2619000;
      break;  // kHz
    case cudaDevAttrGlobalMemoryBusWidth:
      v = p.memoryBusWidth;
      break;
    case cudaDevAttrL2CacheSize:
      v = p.l2CacheSize;
      break;
    case cudaDevAttrMaxThreadsPerMultiProcessor:
      v = p.maxThreadsPerMultiProcessor;
      break;
    case cudaDevAttrAsyncEngineCount:
      v = p.asyncEngineCount;
      break;
    case cudaDevAttrUnifiedAddressing:
      v = p.unifiedAddressing;
      break;
    case cudaDevAttrComputeCapabilityMajor:
      v = p.major;
      break;
    case cudaDevAttrComputeCapabilityMinor:
      v = p.minor;
      break;
    case cudaDevAttrStreamPrioritiesSupported:
      v = p.streamPrioritiesSupported;
      break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor:
      v = static_cast<int>(p.sharedMemPerMultiprocessor);
      break;
    case cudaDevAttrMaxRegistersPerMultiprocessor:
      v = p.regsPerMultiprocessor;
      break;
    case cudaDevAttrManagedMemory:
      v = p.managedMemory;
      break;
    case cudaDevAttrConcurrentManagedAccess:
      v = p.concurrentManagedAccess;
      break;
    case cudaDevAttrCooperativeLaunch:
      v = p.cooperativeLaunch;
      break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
      v = static_cast<int>(p.sharedMemPerBlockOptin);
      break;
    case cudaDevAttrMaxBlocksPerMultiprocessor:
      v = p.maxBlocksPerMultiProcessor;
      break;
    case cudaDevAttrMemoryPoolsSupported:
      v = p.memoryPoolsSupported;
      break;
    default:
      break;
  }
  *value = v;
  return cudaSuccess;
}

void SimCudaRuntime::LockForFork() {
  mu_.Lock();
  memory_.LockForFork();
}

void SimCudaRuntime::UnlockAfterFork() {
  memory_.UnlockAfterFork();
  mu_.Unlock();
}

}  // namespace kvtier::interpose
