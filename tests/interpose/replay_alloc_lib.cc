// The engine-side allocator of alloc_replay: built twice, as libc10_replay.so
// (standing in for PyTorch's libc10_cuda.so) and libggml_replay.so (for
// llama.cpp's libggml-cuda.so), so that kvtier sees the calling library an
// engine's allocations come from (KVTIER_MATCH lib~ terms, verbose logs).
// The results go through a volatile: a tail call would make the program, not
// this library, cudaMalloc's caller (kvtier reads the return address).
// replay_malloc_kv allocates under a constructor named as llama.cpp's KV
// cache's is (llama_kv_cache::llama_kv_cache), which the default match rule
// looks for on the call stack (sym~llama_kv_cache).
#include <cuda_runtime_api.h>

extern "C" __attribute__((visibility("default"))) int replay_malloc(void** p, size_t bytes) {
  volatile cudaError_t e = cudaMalloc(p, bytes);
  return e;
}

extern "C" __attribute__((visibility("default"))) int replay_free(void* p) {
  volatile cudaError_t e = cudaFree(p);
  return e;
}

struct __attribute__((visibility("default"))) llama_kv_cache {
  __attribute__((noinline)) llama_kv_cache(void** p, size_t bytes);
  volatile int error = 0;
};

llama_kv_cache::llama_kv_cache(void** p, size_t bytes) { error = replay_malloc(p, bytes); }

extern "C" __attribute__((visibility("default"))) int replay_malloc_kv(void** p, size_t bytes) {
  llama_kv_cache kv(p, bytes);
  volatile int e = kv.error;
  return e;
}
