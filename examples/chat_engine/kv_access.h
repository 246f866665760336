// KvAccess: how the engine writes and checks KV blocks in device memory.
//
//   cpu   direct pointer access. Only valid where device memory is
//         host-addressable: the kvtier simulated GPU (its device name contains
//         "simulated"). This is the path that exercises simulated page faults.
//   copy  host staging buffers moved with cudaMemcpyAsync on a stream; works
//         on any device, real or simulated.
//   cuda  fill and verify kernels (kernels.cu); only in builds configured with
//         -DKVTIER_CHAT_ENGINE_CUDA=ON, and only on a real GPU.
// Thread-safety: one instance per engine thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace chat {

struct Mismatch {
  size_t word = 0;
  uint64_t expected = 0;
  uint64_t actual = 0;
};

class KvAccess {
 public:
  virtual ~KvAccess() = default;
  // Writes the pattern of `key` into `bytes` bytes (a multiple of 8) at `dev`.
  // False (with `error`) when the device call failed.
  virtual bool Write(void* dev, size_t bytes, uint64_t key, std::string* error) = 0;
  // Checks the block; sets *ok and, on a mismatch, *where.
  virtual bool Verify(const void* dev, size_t bytes, uint64_t key, bool* ok, Mismatch* where,
                      std::string* error) = 0;
};

std::unique_ptr<KvAccess> MakeCpuAccess();
std::unique_ptr<KvAccess> MakeCopyAccess(size_t block_bytes);
// nullptr when the build has no kernels.
std::unique_ptr<KvAccess> MakeCudaAccess(size_t block_bytes);

}  // namespace chat
