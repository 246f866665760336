// CudartErrors: error names, descriptions and the sticky last error of the
// simulated CUDA runtime.
//
// The simulated runtime keeps its own per-thread last error, as libcudart
// does: cudaGetLastError returns and clears it, cudaPeekAtLastError returns
// it. (Asking the real libcudart instead would report its own failure to find
// a driver.) Names and descriptions match libcudart's for the codes the
// simulated runtime returns. Thread-safety: any thread; the last error is
// thread-local.
#pragma once

#include "interpose/cuda_api.h"

namespace kvtier::interpose {

// libcudart's name ("cudaErrorInvalidValue") and description ("invalid
// argument") of `error`; nullptr for a code the simulated runtime never
// returns.
const char* SimErrorName(int error);
const char* SimErrorString(int error);

// Records `error` as the calling thread's last error (cudaSuccess and
// cudaErrorNotReady are not errors and leave it unchanged) and returns it,
// so a hook can `return SimResult(code)`.
cudaError_t SimResult(cudaError_t error);
cudaError_t TakeLastError();  // cudaGetLastError
cudaError_t PeekLastError();  // cudaPeekAtLastError

}  // namespace kvtier::interpose
