// GpuDriver: see gpu_driver.h.
#include "gpu_driver.h"

#include "runtime/device/cuda/real_dl.h"

namespace kvtier::gpu_test {
namespace {

// touch(u8* base, u64 stride, u32 count, u32 value): thread i writes the low
// byte of `value` to base[i * stride]. PTX for the oldest target the driver
// still compiles; the driver compiles it for the GPU at hand.
constexpr const char kTouchPtx[] = R"(
.version 7.0
.target sm_52
.address_size 64

.visible .entry kvtier_touch(
    .param .u64 p_base,
    .param .u64 p_stride,
    .param .u32 p_count,
    .param .u32 p_value)
{
    .reg .pred %p;
    .reg .b16 %rs<2>;
    .reg .b32 %r<6>;
    .reg .b64 %rd<6>;
    ld.param.u64 %rd1, [p_base];
    ld.param.u64 %rd2, [p_stride];
    ld.param.u32 %r1, [p_count];
    ld.param.u32 %r2, [p_value];
    mov.u32 %r3, %ctaid.x;
    mov.u32 %r4, %ntid.x;
    mov.u32 %r5, %tid.x;
    mad.lo.s32 %r3, %r3, %r4, %r5;
    setp.ge.u32 %p, %r3, %r1;
    @%p bra DONE;
    cvta.to.global.u64 %rd1, %rd1;
    cvt.u64.u32 %rd3, %r3;
    mul.lo.u64 %rd4, %rd3, %rd2;
    add.u64 %rd5, %rd1, %rd4;
    cvt.u16.u32 %rs1, %r2;
    st.global.u8 [%rd5], %rs1;
DONE:
    ret;
}
)";

template <typename Fn>
bool Resolve(void* lib, const char* name, Fn* out) {
  *out = reinterpret_cast<Fn>(cuda::RealDlsym(lib, name));
  return *out != nullptr;
}

}  // namespace

GpuDriver* GpuDriver::Get(std::string* why) {
  static GpuDriver* driver = nullptr;
  static std::string reason;
  static bool tried = false;
  if (tried) {
    *why = reason;
    return driver;
  }
  tried = true;
  auto g = new GpuDriver();
  Result<cuda::DriverApi> api = cuda::DriverApi::Load();
  if (!api.ok()) {
    *why = reason = api.status().message();
    return nullptr;
  }
  g->api = api.value();
  void* lib = g->api.library;
  CUresult r = g->api.cuInit(0);
  int count = 0;
  if (r != CUDA_SUCCESS || g->api.cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0) {
    *why = reason = std::string("no CUDA device answers (cuInit: ") + g->api.ErrorName(r) + ")";
    return nullptr;
  }
  bool ok = Resolve(lib, "cuCtxSetCurrent", &g->cuCtxSetCurrent) &&
            Resolve(lib, "cuCtxSynchronize", &g->cuCtxSynchronize) &&
            Resolve(lib, "cuModuleLoadData", &g->cuModuleLoadData) &&
            Resolve(lib, "cuModuleGetFunction", &g->cuModuleGetFunction) &&
            Resolve(lib, "cuLaunchKernel", &g->cuLaunchKernel) &&
            Resolve(lib, "cuMemHostAlloc", &g->cuMemHostAlloc) &&
            Resolve(lib, "cuMemFreeHost", &g->cuMemFreeHost) &&
            Resolve(lib, "cuMemAlloc_v2", &g->cuMemAlloc) &&
            Resolve(lib, "cuMemcpyHtoDAsync_v2", &g->cuMemcpyHtoDAsync) &&
            Resolve(lib, "cuStreamCreate", &g->cuStreamCreate) &&
            Resolve(lib, "cuEventCreate", &g->cuEventCreate) &&
            Resolve(lib, "cuEventRecord", &g->cuEventRecord) &&
            Resolve(lib, "cuEventSynchronize", &g->cuEventSynchronize) &&
            Resolve(lib, "cuEventElapsedTime_v2", &g->cuEventElapsedTime) &&
            Resolve(lib, "cuMemRangeGetAttribute", &g->cuMemRangeGetAttribute);
  if (!ok) {
    *why = reason = "the CUDA driver lacks a function the GPU tests use";
    return nullptr;
  }
  CUmodule module = nullptr;
  if (g->api.cuDeviceGet(&g->device, 0) != CUDA_SUCCESS ||
      g->api.cuDevicePrimaryCtxRetain(&g->context, g->device) != CUDA_SUCCESS ||
      g->cuCtxSetCurrent(g->context) != CUDA_SUCCESS ||
      (r = g->cuModuleLoadData(&module, kTouchPtx)) != CUDA_SUCCESS ||
      g->cuModuleGetFunction(&g->touch, module, "kvtier_touch") != CUDA_SUCCESS) {
    *why = reason = std::string("cannot set up GPU 0 (") + g->api.ErrorName(r) + ")";
    return nullptr;
  }
  driver = g;
  return driver;
}

CUresult GpuDriver::Touch(CUdeviceptr base, size_t stride, unsigned count, unsigned value) {
  unsigned long long b = base, s = stride;
  void* params[] = {&b, &s, &count, &value};
  CUresult r =
      cuLaunchKernel(touch, (count + 127) / 128, 1, 1, 128, 1, 1, 0, nullptr, params, nullptr);
  return r == CUDA_SUCCESS ? cuCtxSynchronize() : r;
}

int GpuDriver::LastPrefetchLocation(CUdeviceptr p, size_t bytes) {
  int location = -2;
  cuMemRangeGetAttribute(&location, sizeof location, CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION,
                         p, bytes);
  return location;
}

}  // namespace kvtier::gpu_test
