// CUDA driver launch hooks: cuLaunchKernel and cuLaunchKernelEx (and _ptsz).
//
// kTier: the launch's arguments are scanned for pointers into tiered regions
// (launch_scan.h), then the real launch runs unchanged. kSim: the simulated
// GPU runs no kernels; the launch fails with CUDA_ERROR_NOT_SUPPORTED and a
// warning once (see cudart_launch.cc for why it must not reach the real
// driver). kPassThrough: the real launch. Thread-safety: any thread.
#include <atomic>

#include "interpose/hook_table.h"
#include "interpose/launch_scan.h"
#include "interpose/preload.h"
#include "runtime/log.h"

using namespace kvtier::interpose;

namespace {

CUresult SimLaunch(const char* what) {
  static std::atomic<bool> warned{false};
  kvtier::WarnOnce(&warned,
                   "%s: the simulated GPU (KVTIER_BACKEND=sim) runs no kernels, it serves the CUDA "
                   "memory API only; returning CUDA_ERROR_NOT_SUPPORTED",
                   what);
  return CUDA_ERROR_NOT_SUPPORTED;
}

template <HookId id>
CUresult LaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                      unsigned bz, unsigned shared, CUstream stream, void** params, void** extra) {
  HookScope scope;
  switch (scope.mode()) {
    case Mode::kPassThrough:
      break;
    case Mode::kSim:
      return SimLaunch(HookName(id));
    case Mode::kTier:
      ScanDriverLaunch(f, params, extra);
      break;
  }
  return CallReal<id>(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra);
}

template <HookId id>
CUresult LaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) {
  HookScope scope;
  switch (scope.mode()) {
    case Mode::kPassThrough:
      break;
    case Mode::kSim:
      return SimLaunch(HookName(id));
    case Mode::kTier:
      ScanDriverLaunch(f, params, extra);
      break;
  }
  return CallReal<id>(config, f, params, extra);
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                unsigned int gridDimZ, unsigned int blockDimX,
                                unsigned int blockDimY, unsigned int blockDimZ,
                                unsigned int sharedMemBytes, CUstream hStream, void** kernelParams,
                                void** extra) {
  return LaunchKernel<HookId::cuLaunchKernel>(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY,
                                              blockDimZ, sharedMemBytes, hStream, kernelParams,
                                              extra);
}

CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                     unsigned int gridDimZ, unsigned int blockDimX,
                                     unsigned int blockDimY, unsigned int blockDimZ,
                                     unsigned int sharedMemBytes, CUstream hStream,
                                     void** kernelParams, void** extra) {
  return LaunchKernel<HookId::cuLaunchKernel_ptsz>(f, gridDimX, gridDimY, gridDimZ, blockDimX,
                                                   blockDimY, blockDimZ, sharedMemBytes, hStream,
                                                   kernelParams, extra);
}

CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** kernelParams,
                                  void** extra) {
  return LaunchKernelEx<HookId::cuLaunchKernelEx>(config, f, kernelParams, extra);
}

CUresult CUDAAPI cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f,
                                       void** kernelParams, void** extra) {
  return LaunchKernelEx<HookId::cuLaunchKernelEx_ptsz>(config, f, kernelParams, extra);
}

}  // extern "C"
