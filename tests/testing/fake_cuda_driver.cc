// The fake CUDA driver of the CUDA backend's tests: see fake_cuda_driver.h.
#include "tests/testing/fake_cuda_driver.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

namespace kvtier::cuda::fake {
namespace {

Driver g;

constexpr uintptr_t kContextBase = 0x1000;
constexpr size_t kAlign = size_t{2} << 20;

CUresult Fails(const char* name) {
  g.calls.emplace_back(name);
  return g.failing == name ? CUDA_ERROR_UNKNOWN : CUDA_SUCCESS;
}

int DeviceOf(CUcontext c) {
  return static_cast<int>(reinterpret_cast<uintptr_t>(c) - kContextBase);
}

int Current() { return g.pushed.empty() ? g.engine_device : g.pushed.back(); }

CUresult Init(unsigned) { return Fails("cuInit"); }
CUresult DeviceCount(int* n) {
  *n = g.gpus;
  return Fails("cuDeviceGetCount");
}
CUresult DeviceGet(CUdevice* d, int ordinal) {
  *d = ordinal;
  return ordinal < g.gpus ? Fails("cuDeviceGet") : CUDA_ERROR_INVALID_DEVICE;
}
CUresult Attribute(int* v, CUdevice_attribute, CUdevice d) {
  *v = g.managed;
  return d < g.gpus ? Fails("cuDeviceGetAttribute") : CUDA_ERROR_INVALID_DEVICE;
}
CUresult Retain(CUcontext* c, CUdevice d) {
  if (d >= g.gpus) return CUDA_ERROR_INVALID_DEVICE;
  if (CUresult r = Fails("cuDevicePrimaryCtxRetain"); r != CUDA_SUCCESS) return r;
  *c = ContextOf(d);
  ++g.retained;
  return CUDA_SUCCESS;
}
CUresult Release(CUdevice) {
  ++g.released;
  return CUDA_SUCCESS;
}
CUresult CtxGetDevice(CUdevice* d) {
  if (Current() < 0) return CUDA_ERROR_INVALID_CONTEXT;
  *d = Current();
  return CUDA_SUCCESS;
}
CUresult Push(CUcontext c) {
  if (CUresult r = Fails("cuCtxPushCurrent"); r != CUDA_SUCCESS) return r;
  g.pushed.push_back(DeviceOf(c));
  return CUDA_SUCCESS;
}
CUresult Pop(CUcontext* c) {
  if (g.pushed.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  *c = ContextOf(g.pushed.back());
  g.pushed.pop_back();
  return CUDA_SUCCESS;
}
CUresult PriorityRange(int* least, int* greatest) {
  *least = 0;
  *greatest = -5;
  return CUDA_SUCCESS;
}
CUresult MakeStream(CUstream* s, unsigned, int priority) {
  if (CUresult r = Fails("cuStreamCreateWithPriority"); r != CUDA_SUCCESS) return r;
  if (Current() < 0) return CUDA_ERROR_INVALID_CONTEXT;
  // One stream per GPU: its handle names the GPU it was made on.
  *s = StreamOf(Current());
  ++g.streams;
  g.stream_priority = priority;
  return CUDA_SUCCESS;
}
CUresult Sync(CUstream) { return Fails("cuStreamSynchronize"); }
CUresult DestroyStream(CUstream) {
  --g.streams;
  return CUDA_SUCCESS;
}
CUresult MemInfo(size_t* free_bytes, size_t* total) {
  const int d = Current();
  if (d < 0) return CUDA_ERROR_INVALID_CONTEXT;
  *free_bytes = g.free_bytes[static_cast<size_t>(d)];
  *total = size_t{80} << 30;
  return Fails("cuMemGetInfo");
}
CUresult AllocManaged(CUdeviceptr* p, size_t bytes, unsigned flags) {
  void* mem = nullptr;
  if (flags != CU_MEM_ATTACH_GLOBAL || Fails("cuMemAllocManaged") != CUDA_SUCCESS ||
      Current() < 0 || posix_memalign(&mem, kAlign, bytes) != 0) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  memset(mem, 0, bytes);  // managed memory starts zeroed
  *p = reinterpret_cast<CUdeviceptr>(mem);
  g.allocations[*p] = {bytes, Current()};
  ++g.allocated;
  return CUDA_SUCCESS;
}
CUresult Free(CUdeviceptr p) {
  if (g.allocations.erase(p) == 0) return CUDA_ERROR_INVALID_VALUE;
  free(reinterpret_cast<void*>(p));
  ++g.freed;
  return CUDA_SUCCESS;
}
CUresult ErrorName(CUresult r, const char** s) {
  *s = r == CUDA_SUCCESS ? "CUDA_SUCCESS" : "CUDA_ERROR_FAKE";
  return CUDA_SUCCESS;
}
CUresult PrefetchLoc(CUdeviceptr p, size_t n, CUmemLocation loc, unsigned, CUstream s) {
  if (CUresult r = Fails("cuMemPrefetchAsync"); r != CUDA_SUCCESS) return r;
  const auto* bytes = reinterpret_cast<const uint8_t*>(p);
  const bool discarded =
      n != 0 && std::all_of(bytes, bytes + n, [](uint8_t b) { return b == kPoison; });
  g.prefetches.push_back({p, n, loc.type == CU_MEM_LOCATION_TYPE_HOST ? -1 : loc.id, s, discarded});
  return CUDA_SUCCESS;
}
CUresult AdviseLoc(CUdeviceptr p, size_t n, CUmem_advise a, CUmemLocation loc) {
  g.advice.push_back({p, n, a, loc.type == CU_MEM_LOCATION_TYPE_HOST ? -1 : loc.id});
  return CUDA_SUCCESS;
}
CUresult PrefetchBatch(CUdeviceptr* ptrs, size_t* sizes, size_t count, CUmemLocation* locs,
                       size_t* first, size_t nlocs, unsigned long long flags, CUstream s) {
  if (nlocs != 1 || first[0] != 0 || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < count; ++i) {
    if (CUresult r = PrefetchLoc(ptrs[i], sizes[i], locs[0], 0, s); r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}
CUresult DiscardBatch(CUdeviceptr* ptrs, size_t* sizes, size_t count, unsigned long long flags,
                      CUstream) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = Fails("cuMemDiscardBatchAsync"); r != CUDA_SUCCESS) return r;
  for (size_t i = 0; i < count; ++i) {
    if (AllocationAt(ptrs[i]) == nullptr) return CUDA_ERROR_INVALID_VALUE;
    memset(reinterpret_cast<void*>(ptrs[i]), kPoison, sizes[i]);
    g.discards.emplace_back(ptrs[i], sizes[i]);
  }
  return CUDA_SUCCESS;
}
CUresult CtxSync() {
  ++g.ctx_syncs;
  if (g.on_ctx_sync) g.on_ctx_sync();
  return Fails("cuCtxSynchronize");
}

}  // namespace

Driver& State() { return g; }

void Reset(int gpus, size_t free_per_gpu) {
  for (auto& [ptr, a] : g.allocations) free(reinterpret_cast<void*>(ptr));
  g = Driver{};
  g.gpus = gpus;
  g.free_bytes.assign(static_cast<size_t>(gpus), free_per_gpu);
}

CUcontext ContextOf(int device) {
  return reinterpret_cast<CUcontext>(kContextBase + static_cast<uintptr_t>(device));
}

CUstream StreamOf(int device) {
  return reinterpret_cast<CUstream>(uintptr_t{0x500} + static_cast<uintptr_t>(device));
}

const Allocation* AllocationAt(CUdeviceptr ptr) {
  auto it = g.allocations.upper_bound(ptr);
  if (it == g.allocations.begin()) return nullptr;
  --it;
  return ptr - it->first < it->second.bytes ? &it->second : nullptr;
}

DriverApi Api(bool batch_calls) {
  DriverApi api;
  api.cuInit = Init;
  api.cuDeviceGetCount = DeviceCount;
  api.cuDeviceGet = DeviceGet;
  api.cuDeviceGetAttribute = Attribute;
  api.cuDevicePrimaryCtxRetain = Retain;
  api.cuDevicePrimaryCtxRelease = Release;
  api.cuCtxGetDevice = CtxGetDevice;
  api.cuCtxPushCurrent = Push;
  api.cuCtxPopCurrent = Pop;
  api.cuCtxGetStreamPriorityRange = PriorityRange;
  api.cuStreamCreateWithPriority = MakeStream;
  api.cuStreamSynchronize = Sync;
  api.cuStreamDestroy = DestroyStream;
  api.cuMemGetInfo = MemInfo;
  api.cuMemAllocManaged = AllocManaged;
  api.cuMemFree = Free;
  api.cuGetErrorName = ErrorName;
  api.cuMemPrefetchAsyncLocation = PrefetchLoc;
  api.cuMemAdviseLocation = AdviseLoc;
  api.cuCtxSynchronize = CtxSync;
  if (batch_calls) {
    api.cuMemPrefetchBatchAsync = PrefetchBatch;
    api.cuMemDiscardBatchAsync = DiscardBatch;
  }
  return api;
}

// ---- HostApi: the stand-in for benchmarks ----

namespace {

std::mutex g_host_mu;
std::map<CUdeviceptr, std::pair<void*, size_t> > g_host_maps;  // aligned ptr -> mapping

constexpr size_t kHostAlign = size_t{2} << 20;

CUresult HostAlloc(CUdeviceptr* p, size_t bytes, unsigned) {
  const size_t len = bytes + kHostAlign;
  void* map = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  const uintptr_t aligned =
      (reinterpret_cast<uintptr_t>(map) + kHostAlign - 1) / kHostAlign * kHostAlign;
  // The driver backs managed memory in large pages too: a restore's copy
  // then meets one fault per 2 MiB, not one per 4 KiB.
  madvise(reinterpret_cast<void*>(aligned), bytes, MADV_HUGEPAGE);
  *p = static_cast<CUdeviceptr>(aligned);
  std::lock_guard<std::mutex> lock(g_host_mu);
  g_host_maps[*p] = {map, len};
  return CUDA_SUCCESS;
}
CUresult HostFree(CUdeviceptr p) {
  std::lock_guard<std::mutex> lock(g_host_mu);
  auto it = g_host_maps.find(p);
  if (it == g_host_maps.end()) return CUDA_ERROR_INVALID_VALUE;
  munmap(it->second.first, it->second.second);
  g_host_maps.erase(it);
  return CUDA_SUCCESS;
}
CUresult HostDiscard(CUdeviceptr* ptrs, size_t* sizes, size_t count, unsigned long long, CUstream) {
  for (size_t i = 0; i < count; ++i) {
    if (madvise(reinterpret_cast<void*>(ptrs[i]), sizes[i], MADV_DONTNEED) != 0) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  return CUDA_SUCCESS;
}
CUresult HostMemInfo(size_t* free_bytes, size_t* total) {
  *total =
      static_cast<size_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<size_t>(sysconf(_SC_PAGESIZE));
  *free_bytes = *total / 2;
  return CUDA_SUCCESS;
}

}  // namespace

DriverApi HostApi() {
  DriverApi api;
  api.cuMemAllocManaged = HostAlloc;
  api.cuMemFree = HostFree;
  api.cuMemDiscardBatchAsync = HostDiscard;
  api.cuMemGetInfo = HostMemInfo;
  api.cuCtxGetDevice = [](CUdevice* d) {
    *d = 0;
    return CUDA_SUCCESS;
  };
  api.cuCtxGetStreamPriorityRange = [](int* least, int* greatest) {
    *least = *greatest = 0;
    return CUDA_SUCCESS;
  };
  api.cuStreamCreateWithPriority = [](CUstream* s, unsigned, int) {
    *s = nullptr;
    return CUDA_SUCCESS;
  };
  api.cuStreamSynchronize = [](CUstream) { return CUDA_SUCCESS; };
  api.cuStreamDestroy = [](CUstream) { return CUDA_SUCCESS; };
  api.cuCtxSynchronize = [] { return CUDA_SUCCESS; };
  api.cuMemPrefetchAsyncLocation = [](CUdeviceptr, size_t, CUmemLocation, unsigned, CUstream) {
    return CUDA_SUCCESS;
  };
  api.cuMemAdviseLocation = [](CUdeviceptr, size_t, CUmem_advise, CUmemLocation) {
    return CUDA_SUCCESS;
  };
  return api;
}

}  // namespace kvtier::cuda::fake
