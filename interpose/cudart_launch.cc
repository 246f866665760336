// CUDA runtime hooks for kernel launches.
//
// The simulated GPU serves the memory API only: it cannot run a kernel, so a
// launch fails with cudaErrorNotSupported, sets the sticky last error (the
// check a program makes after <<<...>>>) and warns once. Passing the launch
// to the real libcudart instead would fail there, invisibly to the simulated
// cudaGetLastError, and the program would carry on as if its kernel ran. With
// a real device backend (kTier) the launch's arguments are scanned for
// pointers into tiered regions first (launch_scan.h); otherwise a launch
// passes through unchanged. Thread-safety: any thread.
#include <atomic>

#include "interpose/cudart_errors.h"
#include "interpose/hook_table.h"
#include "interpose/launch_scan.h"
#include "interpose/preload.h"
#include "runtime/log.h"

using namespace kvtier::interpose;

namespace {

cudaError_t SimLaunch(const char* what) {
  static std::atomic<bool> warned{false};
  kvtier::WarnOnce(&warned,
                   "%s: the simulated GPU (KVTIER_BACKEND=sim) runs no kernels, it serves the CUDA "
                   "memory API only; returning cudaErrorNotSupported",
                   what);
  return SimResult(cudaErrorNotSupported);
}

}  // namespace

extern "C" {

cudaError_t cudaLaunchKernel(const void* func, dim3 gridDim, dim3 blockDim, void** args,
                             size_t sharedMem, cudaStream_t stream) {
  HookScope scope;
  const Mode mode = scope.mode();
  if (mode == Mode::kSim) return SimLaunch("cudaLaunchKernel");
  if (mode == Mode::kTier) ScanRuntimeLaunch(func, args);
  return CallReal<HookId::cudaLaunchKernel>(func, gridDim, blockDim, args, sharedMem, stream);
}

cudaError_t cudaLaunchKernel_ptsz(const void* func, dim3 gridDim, dim3 blockDim, void** args,
                                  size_t sharedMem, cudaStream_t stream) {
  HookScope scope;
  const Mode mode = scope.mode();
  if (mode == Mode::kSim) return SimLaunch("cudaLaunchKernel");
  if (mode == Mode::kTier) ScanRuntimeLaunch(func, args);
  return CallReal<HookId::cudaLaunchKernel_ptsz>(func, gridDim, blockDim, args, sharedMem, stream);
}

cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t* config, const void* func, void** args) {
  HookScope scope;
  const Mode mode = scope.mode();
  if (mode == Mode::kSim) return SimLaunch("cudaLaunchKernelExC");
  if (mode == Mode::kTier) ScanRuntimeLaunch(func, args);
  return CallReal<HookId::cudaLaunchKernelExC>(config, func, args);
}

cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t* config, const void* func,
                                     void** args) {
  HookScope scope;
  const Mode mode = scope.mode();
  if (mode == Mode::kSim) return SimLaunch("cudaLaunchKernelExC");
  if (mode == Mode::kTier) ScanRuntimeLaunch(func, args);
  return CallReal<HookId::cudaLaunchKernelExC_ptsz>(config, func, args);
}

cudaError_t cudaLaunchCooperativeKernel(const void* func, dim3 gridDim, dim3 blockDim, void** args,
                                        size_t sharedMem, cudaStream_t stream) {
  HookScope scope;
  const Mode mode = scope.mode();
  if (mode == Mode::kSim) return SimLaunch("cudaLaunchCooperativeKernel");
  if (mode == Mode::kTier) ScanRuntimeLaunch(func, args);
  return CallReal<HookId::cudaLaunchCooperativeKernel>(func, gridDim, blockDim, args, sharedMem,
                                                       stream);
}

cudaError_t cudaLaunchCooperativeKernel_ptsz(const void* func, dim3 gridDim, dim3 blockDim,
                                             void** args, size_t sharedMem, cudaStream_t stream) {
  HookScope scope;
  const Mode mode = scope.mode();
  if (mode == Mode::kSim) return SimLaunch("cudaLaunchCooperativeKernel");
  if (mode == Mode::kTier) ScanRuntimeLaunch(func, args);
  return CallReal<HookId::cudaLaunchCooperativeKernel_ptsz>(func, gridDim, blockDim, args,
                                                            sharedMem, stream);
}

}  // extern "C"
