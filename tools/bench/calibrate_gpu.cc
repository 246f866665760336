// MeasureGpu (calibrate.h): the GPU figures of the cost model and of the
// design's open questions, through the CUDA backend's DriverApi (the same
// driver calls the backend makes) and the kernels of gpu_kernels.h. Every
// buffer is a quarter of the GPU's free memory at most, and 256 MiB for all
// but the prefetch buffer. A figure that cannot be measured is left at 0
// with the reason in `skipped`; the others are still taken.
// Thread-safety: single-threaded tool.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "tools/bench/calibrate.h"

#ifdef KVTIER_HAVE_CUDA
#include "runtime/device/cuda/driver_api.h"
#include "runtime/device/cuda/real_dl.h"
#include "tools/bench/gpu_kernels.h"
#endif

namespace kvtier::bench {

#ifndef KVTIER_HAVE_CUDA

GpuFigures MeasureGpu(uint64_t) {
  GpuFigures g;
  g.note = "not measured: this build has no CUDA backend (KVTIER_WITH_CUDA=OFF)";
  return g;
}

#else

namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kBlock = 2 * kMiB;   // the UVM VA block
constexpr uint64_t kSmall = 64 << 10;   // the UVM basic block, kvtier's default page
constexpr uint64_t kSide = 256 * kMiB;  // the other buffers

double Seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The driver functions the measurements need beyond the backend's.
struct Extra {
  CUresult (*cuModuleLoadData)(CUmodule*, const void*) = nullptr;
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*) = nullptr;
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, CUstream, void**, void**) = nullptr;
  CUresult (*cuMemHostAlloc)(void**, size_t, unsigned) = nullptr;
  CUresult (*cuMemFreeHost)(void*) = nullptr;
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t) = nullptr;
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void*, size_t, CUstream) = nullptr;
  CUresult (*cuEventCreate)(CUevent*, unsigned) = nullptr;
  CUresult (*cuEventDestroy)(CUevent) = nullptr;
  CUresult (*cuEventRecord)(CUevent, CUstream) = nullptr;
  CUresult (*cuEventSynchronize)(CUevent) = nullptr;
  CUresult (*cuEventElapsedTime)(float*, CUevent, CUevent) = nullptr;

  bool Load(void* lib) {
    auto get = [lib](const char* a, const char* b, auto* fn) {
      *fn = reinterpret_cast<std::remove_reference_t<decltype(*fn)> >(cuda::RealDlsym(lib, a));
      if (*fn == nullptr && b != nullptr) {
        *fn = reinterpret_cast<std::remove_reference_t<decltype(*fn)> >(cuda::RealDlsym(lib, b));
      }
      return *fn != nullptr;
    };
    return get("cuModuleLoadData", nullptr, &cuModuleLoadData) &&
           get("cuModuleGetFunction", nullptr, &cuModuleGetFunction) &&
           get("cuLaunchKernel", nullptr, &cuLaunchKernel) &&
           get("cuMemHostAlloc", nullptr, &cuMemHostAlloc) &&
           get("cuMemFreeHost", nullptr, &cuMemFreeHost) &&
           get("cuMemAlloc_v2", nullptr, &cuMemAlloc) &&
           get("cuMemcpyHtoDAsync_v2", nullptr, &cuMemcpyHtoDAsync) &&
           get("cuEventCreate", nullptr, &cuEventCreate) &&
           get("cuEventDestroy_v2", "cuEventDestroy", &cuEventDestroy) &&
           get("cuEventRecord", nullptr, &cuEventRecord) &&
           get("cuEventSynchronize", nullptr, &cuEventSynchronize) &&
           get("cuEventElapsedTime_v2", "cuEventElapsedTime", &cuEventElapsedTime);
  }
};

// One measuring session on the current context.
class Bench {
 public:
  Bench(const cuda::DriverApi& api, const Extra& x, CUdevice device, GpuFigures* g)
      : api_(api), x_(x), device_(device), g_(g) {}
  ~Bench() {
    if (start_) x_.cuEventDestroy(start_);
    if (stop_) x_.cuEventDestroy(stop_);
    if (stream_) api_.cuStreamDestroy(stream_);
    if (side_stream_) api_.cuStreamDestroy(side_stream_);
    if (managed_) api_.cuMemFree(managed_);
  }

  // Streams, events, kernels and the managed buffer; false (and g_->note)
  // when the session cannot start.
  bool Start(uint64_t bytes) {
    int least = 0, greatest = 0;
    if (api_.cuCtxGetStreamPriorityRange(&least, &greatest) != CUDA_SUCCESS) least = 0;
    CUmodule touch = nullptr, sums = nullptr;
    CUresult r = api_.cuStreamCreateWithPriority(&stream_, CU_STREAM_NON_BLOCKING, least);
    if (r == CUDA_SUCCESS) {
      r = api_.cuStreamCreateWithPriority(&side_stream_, CU_STREAM_NON_BLOCKING, greatest);
    }
    if (r == CUDA_SUCCESS) r = x_.cuEventCreate(&start_, 0);
    if (r == CUDA_SUCCESS) r = x_.cuEventCreate(&stop_, 0);
    if (r == CUDA_SUCCESS) r = x_.cuModuleLoadData(&touch, kTouchPtx);
    if (r == CUDA_SUCCESS) r = x_.cuModuleGetFunction(&touch_, touch, "kvtier_touch");
    if (r == CUDA_SUCCESS) r = x_.cuModuleLoadData(&sums, kPageSumsPtx);
    if (r == CUDA_SUCCESS) r = x_.cuModuleGetFunction(&sums_, sums, "kvtier_page_sums");
    if (r == CUDA_SUCCESS) r = api_.cuMemAllocManaged(&managed_, bytes, CU_MEM_ATTACH_GLOBAL);
    if (r != CUDA_SUCCESS) {
      g_->note = std::string(
                     "not measured: setting up streams, events, kernels and a managed "
                     "buffer failed with ") +
                 api_.ErrorName(r);
      return false;
    }
    bytes_ = bytes;
    memset(reinterpret_cast<void*>(managed_), 1, bytes);  // every page populated on the host
    return true;
  }

  // The whole buffer in one prefetch (median of 3), as before.
  void WholePrefetch() {
    std::vector<double> s;
    for (int i = 0; i < 3; ++i) {
      if (!ToHost(managed_, bytes_)) return;
      const double t0 = Seconds();
      if (!Ok(api_.Prefetch(managed_, bytes_, false, device_, stream_), "prefetch") ||
          !Ok(api_.cuStreamSynchronize(stream_), "prefetch")) {
        return;
      }
      s.push_back(Seconds() - t0);
    }
    g_->prefetch_bps = static_cast<double>(bytes_) / Median(s);
    g_->prefetch_bytes = bytes_;
  }

  // One prefetch call per `chunk`, over `bytes` of the buffer.
  double ChunkedPrefetch(uint64_t bytes, uint64_t chunk) {
    if (!ToHost(managed_, bytes)) return 0;
    const double t0 = Seconds();
    for (uint64_t off = 0; off < bytes; off += chunk) {
      if (!Ok(api_.Prefetch(managed_ + off, chunk, false, device_, stream_), "chunked prefetch")) {
        return 0;
      }
    }
    if (!Ok(api_.cuStreamSynchronize(stream_), "chunked prefetch")) return 0;
    return static_cast<double>(bytes) / (Seconds() - t0);
  }

  // Every other 64 KiB of `bytes` in one call: the scattered pages of
  // sessions that come back together.
  void BatchPrefetch(uint64_t bytes) {
    g_->batch_call = api_.cuMemPrefetchBatchAsync != nullptr;
    if (!ToHost(managed_, bytes)) return;
    std::vector<CUdeviceptr> ptrs;
    std::vector<size_t> sizes;
    for (uint64_t off = 0; off < bytes; off += 2 * kSmall) {
      ptrs.push_back(managed_ + off);
      sizes.push_back(kSmall);
    }
    const double t0 = Seconds();
    if (!Ok(api_.PrefetchRanges(ptrs.data(), sizes.data(), ptrs.size(), false, device_, stream_),
            "batch prefetch") ||
        !Ok(api_.cuStreamSynchronize(stream_), "batch prefetch")) {
      return;
    }
    g_->prefetch_batch_bps = static_cast<double>(ptrs.size() * kSmall) / (Seconds() - t0);
  }

  // cuMemcpyHtoDAsync from pinned memory: what explicit offload moves at.
  void PinnedCopy(uint64_t bytes) {
    void* host = nullptr;
    CUdeviceptr dev = 0;
    if (Ok(x_.cuMemHostAlloc(&host, bytes, 0), "pinned copy") &&
        Ok(x_.cuMemAlloc(&dev, bytes), "pinned copy")) {
      memset(host, 2, bytes);
      std::vector<double> s;
      for (int i = 0; i < 4; ++i) {  // the first warms up
        const double ms =
            Timed(stream_, [&] { return x_.cuMemcpyHtoDAsync(dev, host, bytes, stream_); });
        if (ms <= 0) break;
        if (i > 0) s.push_back(ms / 1e3);
      }
      if (!s.empty()) g_->pinned_copy_bps = static_cast<double>(bytes) / Median(s);
    }
    if (dev) api_.cuMemFree(dev);
    if (host) x_.cuMemFreeHost(host);
  }

  // A kernel touching every 64 KiB of a host-resident buffer: the driver
  // migrates on faults; then one fault alone, against the same touch of a
  // page already on the device.
  void Faults(uint64_t bytes) {
    if (!ToHost(managed_, bytes)) return;
    const double ms = Timed(stream_, [&] { return Touch(managed_, kSmall, bytes / kSmall); });
    if (ms > 0) g_->fault_bps = static_cast<double>(bytes) / (ms / 1e3);
    if (!ToHost(managed_, bytes)) return;
    std::vector<double> faulting, resident;
    for (uint64_t i = 0; i < 32 && (i + 1) * kBlock <= bytes; ++i) {
      const CUdeviceptr at = managed_ + i * kBlock;
      const double f = Timed(stream_, [&] { return Touch(at, 0, 1); });
      const double r = Timed(stream_, [&] { return Touch(at, 0, 1); });
      if (f <= 0 || r <= 0) return;
      faulting.push_back(f);
      resident.push_back(r);
    }
    g_->fault_latency_ns = std::max(0.0, (Median(faulting) - Median(resident)) * 1e6);
  }

  // A kernel that reads 256 MiB of device memory page by page, as a decode
  // step reads the KV of its sequences, alone and while the backend's
  // low-priority stream moves managed memory both ways beside it.
  void DecodeBesidePrefetch() {
    const uint64_t bytes = std::min(kSide, bytes_);
    const unsigned pages = static_cast<unsigned>(bytes / kBlock);
    CUdeviceptr kv = 0, out = 0;
    if (!Ok(x_.cuMemAlloc(&kv, bytes), "decode kernel") ||
        !Ok(x_.cuMemAlloc(&out, pages * sizeof(uint64_t)), "decode kernel")) {
      if (kv) api_.cuMemFree(kv);
      return;
    }
    auto decode = [&] { return Sums(kv, kBlock, pages, out); };
    std::vector<double> alone, beside;
    for (int i = 0; i < 6; ++i) {
      const double ms = Timed(side_stream_, decode);
      if (ms <= 0) break;
      if (i > 0) alone.push_back(ms);
    }
    if (ToHost(managed_, bytes)) {
      // Enough migration queued to outlast the decode runs.
      bool queued = true;
      for (int i = 0; i < 8 && queued; ++i) {
        queued = Ok(api_.Prefetch(managed_, bytes, false, device_, stream_), "prefetch beside") &&
                 Ok(api_.Prefetch(managed_, bytes, true, device_, stream_), "prefetch beside");
      }
      for (int i = 0; queued && i < 5; ++i) {
        const double ms = Timed(side_stream_, decode);
        if (ms <= 0) break;
        beside.push_back(ms);
      }
      Ok(api_.cuStreamSynchronize(stream_), "prefetch beside");
    }
    if (!alone.empty() && !beside.empty()) {
      g_->decode_alone_ms = Median(alone);
      g_->decode_beside_ms = Median(beside);
    }
    api_.cuMemFree(out);
    api_.cuMemFree(kv);
  }

 private:
  bool Ok(CUresult r, const char* what) {
    if (r == CUDA_SUCCESS) return true;
    g_->skipped.push_back(std::string(what) + ": " + api_.ErrorName(r));
    return false;
  }
  bool ToHost(CUdeviceptr p, uint64_t bytes) {
    return Ok(api_.Prefetch(p, bytes, true, device_, stream_), "prefetch to the host") &&
           Ok(api_.cuStreamSynchronize(stream_), "prefetch to the host");
  }
  // Milliseconds of `work` on `stream` between two events; 0 on a failure.
  template <typename Work>
  double Timed(CUstream stream, Work&& work) {
    float ms = 0;
    if (!Ok(x_.cuEventRecord(start_, stream), "event") || !Ok(work(), "timed work") ||
        !Ok(x_.cuEventRecord(stop_, stream), "event") ||
        !Ok(x_.cuEventSynchronize(stop_), "event") ||
        !Ok(x_.cuEventElapsedTime(&ms, start_, stop_), "event")) {
      return 0;
    }
    return ms;
  }
  CUresult Touch(CUdeviceptr base, uint64_t stride, uint64_t count) {
    unsigned long long b = base, s = stride;
    unsigned n = static_cast<unsigned>(count), value = 7;
    void* params[] = {&b, &s, &n, &value};
    return x_.cuLaunchKernel(touch_, (n + 127) / 128, 1, 1, 128, 1, 1, 0, stream_, params, nullptr);
  }
  CUresult Sums(CUdeviceptr base, uint64_t page, unsigned pages, CUdeviceptr out) {
    unsigned long long b = base, p = page, o = out;
    void* params[] = {&b, &p, &pages, &o};
    return x_.cuLaunchKernel(sums_, pages, 1, 1, 256, 1, 1, 0, side_stream_, params, nullptr);
  }

  const cuda::DriverApi& api_;
  const Extra& x_;
  const CUdevice device_;
  GpuFigures* const g_;
  CUstream stream_ = nullptr;       // lowest priority, as the backend's
  CUstream side_stream_ = nullptr;  // highest, as an engine's compute
  CUevent start_ = nullptr, stop_ = nullptr;
  CUfunction touch_ = nullptr, sums_ = nullptr;
  CUdeviceptr managed_ = 0;
  uint64_t bytes_ = 0;
};

// Runs with the device's primary context current.
GpuFigures MeasureInContext(const cuda::DriverApi& api, CUdevice device, uint64_t bytes) {
  GpuFigures g;
  char name[128] = "";
  if (api.cuDeviceGetName == nullptr ||
      api.cuDeviceGetName(name, sizeof name, device) != CUDA_SUCCESS) {
    snprintf(name, sizeof name, "unnamed");
  }
  g.device = "GPU " + std::to_string(static_cast<int>(device)) + " (" + name + ")";
  size_t free_bytes = 0, total = 0;
  CUresult r = api.cuMemGetInfo(&free_bytes, &total);
  if (r != CUDA_SUCCESS) {
    g.note = std::string("not measured: cuMemGetInfo failed with ") + api.ErrorName(r);
    return g;
  }
  Extra x;
  if (!x.Load(api.library)) {
    g.note = "not measured: the CUDA driver lacks a function the measurements use";
    return g;
  }
  // A quarter of what is free at most, for all buffers together: never ask
  // for more managed memory than the device can hold beside whatever else
  // runs on it.
  bytes = std::min<uint64_t>(bytes, free_bytes / 4 - std::min<uint64_t>(free_bytes / 4, 2 * kSide));
  bytes = bytes / kBlock * kBlock;
  if (bytes < 16 * kBlock) {
    g.note =
        "not measured: too little GPU memory free (" + std::to_string(free_bytes >> 20) + " MiB)";
    return g;
  }
  Bench bench(api, x, device, &g);
  if (!bench.Start(bytes)) return g;
  bench.WholePrefetch();
  if (g.prefetch_bps <= 0) {
    g.note = "not measured: the prefetch of the managed buffer failed";
    return g;
  }
  const uint64_t side = std::min(kSide, bytes);
  g.prefetch_2m_bps = bench.ChunkedPrefetch(bytes, kBlock);
  g.prefetch_64k_bps = bench.ChunkedPrefetch(side, kSmall);
  bench.BatchPrefetch(side);
  bench.PinnedCopy(side);
  bench.Faults(side);
  bench.DecodeBesidePrefetch();
  g.measured = true;
  g.memory_bytes = static_cast<double>(total);
  g.note = "measured on " + g.device;
  return g;
}

}  // namespace

GpuFigures MeasureGpu(uint64_t bytes) {
  GpuFigures g;
  Result<cuda::DriverApi> loaded = cuda::DriverApi::Load();
  if (!loaded.ok()) {
    g.note = "not measured: " + loaded.status().message();
    return g;
  }
  const cuda::DriverApi& api = loaded.value();
  CUresult r = api.cuInit(0);
  int count = 0;
  if (r == CUDA_SUCCESS) r = api.cuDeviceGetCount(&count);
  if (r != CUDA_SUCCESS || count == 0) {
    g.note = std::string("not measured: no GPU (") +
             (r != CUDA_SUCCESS ? api.ErrorName(r) : "the driver sees no device") + ")";
    return g;
  }
  CUdevice device = 0;
  int managed = 0;
  if ((r = api.cuDeviceGet(&device, 0)) == CUDA_SUCCESS) {
    api.cuDeviceGetAttribute(&managed, CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, device);
  }
  if (r != CUDA_SUCCESS || !managed) {
    g.note = "not measured: GPU 0 has no concurrent managed memory access";
    return g;
  }
  CUcontext context = nullptr;
  if ((r = api.cuDevicePrimaryCtxRetain(&context, device)) != CUDA_SUCCESS ||
      (r = api.cuCtxPushCurrent(context)) != CUDA_SUCCESS) {
    if (context != nullptr) api.cuDevicePrimaryCtxRelease(device);
    g.note = std::string("not measured: no context on GPU 0 (") + api.ErrorName(r) + ")";
    return g;
  }
  g = MeasureInContext(api, device, bytes);
  CUcontext popped;
  api.cuCtxPopCurrent(&popped);
  api.cuDevicePrimaryCtxRelease(device);
  return g;
}

#endif  // KVTIER_HAVE_CUDA

}  // namespace kvtier::bench
