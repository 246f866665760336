// The engine-side allocator of alloc_replay: built twice, as libc10_replay.so
// (standing in for PyTorch's libc10_cuda.so) and libggml_replay.so (for
// llama.cpp's libggml-cuda.so), so that kvtier sees the calling library an
// engine's allocations come from (KVTIER_MATCH lib~ terms, verbose logs).
// The results go through a volatile: a tail call would make the program, not
// this library, cudaMalloc's caller (kvtier reads the return address).
#include <cuda_runtime_api.h>

extern "C" __attribute__((visibility("default"))) int replay_malloc(void** p, size_t bytes) {
  volatile cudaError_t e = cudaMalloc(p, bytes);
  return e;
}

extern "C" __attribute__((visibility("default"))) int replay_free(void* p) {
  volatile cudaError_t e = cudaFree(p);
  return e;
}
