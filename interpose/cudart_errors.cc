// CudartErrors: see cudart_errors.h.
#include "interpose/cudart_errors.h"

namespace kvtier::interpose {
namespace {

// Every code the simulated runtime returns, with libcudart's own texts.
#define KVTIER_SIM_ERRORS(X)                                              \
  X(cudaSuccess, "no error")                                              \
  X(cudaErrorInvalidValue, "invalid argument")                            \
  X(cudaErrorMemoryAllocation, "out of memory")                           \
  X(cudaErrorInvalidDevicePointer, "invalid device pointer")              \
  X(cudaErrorInvalidMemcpyDirection, "invalid copy direction for memcpy") \
  X(cudaErrorInvalidDevice, "invalid device ordinal")                     \
  X(cudaErrorInvalidResourceHandle, "invalid resource handle")            \
  X(cudaErrorSymbolNotFound, "named symbol not found")                    \
  X(cudaErrorNotReady, "device not ready")                                \
  X(cudaErrorNotSupported, "operation not supported")

[[gnu::tls_model("initial-exec")]] constinit thread_local cudaError_t t_last_error = cudaSuccess;

}  // namespace

const char* SimErrorName(int error) {
  switch (error) {
#define KVTIER_NAME_CASE(code, text) \
  case code:                         \
    return #code;
    KVTIER_SIM_ERRORS(KVTIER_NAME_CASE)
#undef KVTIER_NAME_CASE
    default:
      return nullptr;
  }
}

const char* SimErrorString(int error) {
  switch (error) {
#define KVTIER_TEXT_CASE(code, text) \
  case code:                         \
    return text;
    KVTIER_SIM_ERRORS(KVTIER_TEXT_CASE)
#undef KVTIER_TEXT_CASE
    default:
      return nullptr;
  }
}

cudaError_t SimResult(cudaError_t error) {
  if (error != cudaSuccess && error != cudaErrorNotReady) t_last_error = error;
  return error;
}

cudaError_t TakeLastError() {
  cudaError_t e = t_last_error;
  t_last_error = cudaSuccess;
  return e;
}

cudaError_t PeekLastError() { return t_last_error; }

}  // namespace kvtier::interpose
