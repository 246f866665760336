// KvAccess with CUDA kernels (--compute cuda): the fill and the check run on
// the GPU, so device memory is never touched by the CPU. Built only with
// -DKVTIER_CHAT_ENGINE_CUDA=ON. Thread-safety: one instance per thread.
#include <cuda_runtime.h>

#include "kv_access.h"

namespace chat {
namespace {

constexpr unsigned long long kWordStep = 0x9e3779b97f4a7c15ull;  // pattern.h

__global__ void FillKernel(unsigned long long* words, size_t n, unsigned long long key) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    words[i] = key ^ (i * kWordStep);
  }
}

// Records the lowest mismatching index in *first (initialised to n).
__global__ void VerifyKernel(const unsigned long long* words, size_t n, unsigned long long key,
                             unsigned long long* first) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    if (words[i] != (key ^ (i * kWordStep))) atomicMin(first, static_cast<unsigned long long>(i));
  }
}

std::string CudaError(const char* call, cudaError_t e) {
  return std::string(call) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
}

class CudaAccess : public KvAccess {
 public:
  ~CudaAccess() override {
    if (first_) cudaFree(first_);
  }
  bool Write(void* dev, size_t bytes, uint64_t key, std::string* error) override {
    FillKernel<<<256, 256>>>(static_cast<unsigned long long*>(dev), bytes / 8, key);
    cudaError_t e = cudaGetLastError();  // the launch itself
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    if (e != cudaSuccess) *error = CudaError("fill kernel", e);
    return e == cudaSuccess;
  }
  bool Verify(const void* dev, size_t bytes, uint64_t key, bool* ok, Mismatch* where,
              std::string* error) override {
    cudaError_t e = first_ ? cudaSuccess : cudaMalloc(&first_, sizeof *first_);
    unsigned long long n = bytes / 8, first = n;
    if (e == cudaSuccess) e = cudaMemcpy(first_, &first, sizeof first, cudaMemcpyHostToDevice);
    if (e == cudaSuccess) {
      VerifyKernel<<<256, 256>>>(static_cast<const unsigned long long*>(dev), n, key, first_);
      e = cudaGetLastError();  // the launch itself
      if (e == cudaSuccess) e = cudaMemcpy(&first, first_, sizeof first, cudaMemcpyDeviceToHost);
    }
    if (e != cudaSuccess) {
      *error = CudaError("verify kernel", e);
      return false;
    }
    *ok = first == n;
    if (!*ok) {
      unsigned long long actual = 0;
      cudaMemcpy(&actual, static_cast<const unsigned long long*>(dev) + first, sizeof actual,
                 cudaMemcpyDeviceToHost);
      *where = Mismatch{static_cast<size_t>(first), key ^ (first * kWordStep), actual};
    }
    return true;
  }

 private:
  unsigned long long* first_ = nullptr;
};

}  // namespace

std::unique_ptr<KvAccess> MakeCudaAccess(size_t) { return std::make_unique<CudaAccess>(); }

}  // namespace chat
