// KvAccess implementations without kernels: cpu (direct) and copy (staged
// through cudaMemcpyAsync). See kv_access.h.
#include "kv_access.h"

#include <cuda_runtime_api.h>

#include <vector>

#include "pattern.h"

namespace chat {
namespace {

std::string CudaError(const char* call, cudaError_t e) {
  return std::string(call) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
}

class CpuAccess : public KvAccess {
 public:
  bool Write(void* dev, size_t bytes, uint64_t key, std::string*) override {
    FillPattern(static_cast<uint64_t*>(dev), bytes / 8, key);
    return true;
  }
  bool Verify(const void* dev, size_t bytes, uint64_t key, bool* ok, Mismatch* where,
              std::string*) override {
    const auto* words = static_cast<const uint64_t*>(dev);
    size_t n = bytes / 8;
    size_t i = FirstMismatch(words, n, key);
    *ok = i == n;
    if (!*ok) *where = Mismatch{i, PatternWord(key, i), words[i]};
    return true;
  }
};

class CopyAccess : public KvAccess {
 public:
  explicit CopyAccess(size_t block_bytes) : staging_(block_bytes / 8) {}
  ~CopyAccess() override {
    if (stream_) cudaStreamDestroy(stream_);
  }

  bool Write(void* dev, size_t bytes, uint64_t key, std::string* error) override {
    if (!Init(error)) return false;
    FillPattern(staging_.data(), bytes / 8, key);
    cudaError_t e = cudaMemcpyAsync(dev, staging_.data(), bytes, cudaMemcpyHostToDevice, stream_);
    if (e == cudaSuccess) e = cudaStreamSynchronize(stream_);
    if (e != cudaSuccess) *error = CudaError("cudaMemcpyAsync(host to device)", e);
    return e == cudaSuccess;
  }

  bool Verify(const void* dev, size_t bytes, uint64_t key, bool* ok, Mismatch* where,
              std::string* error) override {
    if (!Init(error)) return false;
    cudaError_t e = cudaMemcpyAsync(staging_.data(), dev, bytes, cudaMemcpyDeviceToHost, stream_);
    if (e == cudaSuccess) e = cudaStreamSynchronize(stream_);
    if (e != cudaSuccess) {
      *error = CudaError("cudaMemcpyAsync(device to host)", e);
      return false;
    }
    size_t n = bytes / 8;
    size_t i = FirstMismatch(staging_.data(), n, key);
    *ok = i == n;
    if (!*ok) *where = Mismatch{i, PatternWord(key, i), staging_[i]};
    return true;
  }

 private:
  bool Init(std::string* error) {
    if (stream_) return true;
    cudaError_t e = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
    if (e != cudaSuccess) *error = CudaError("cudaStreamCreateWithFlags", e);
    return e == cudaSuccess;
  }

  std::vector<uint64_t> staging_;
  cudaStream_t stream_ = nullptr;
};

}  // namespace

std::unique_ptr<KvAccess> MakeCpuAccess() { return std::make_unique<CpuAccess>(); }
std::unique_ptr<KvAccess> MakeCopyAccess(size_t block_bytes) {
  return std::make_unique<CopyAccess>(block_bytes);
}

#ifndef CHAT_ENGINE_HAVE_KERNELS
std::unique_ptr<KvAccess> MakeCudaAccess(size_t) { return nullptr; }
#endif

}  // namespace chat
