// cudart_probe: calls a few CUDA runtime functions and prints their return
// codes, then does the same in a forked child. Built against the real
// libcudart; the interposer tests compare its output with and without the
// preload (pass-through must not change a single code) and check the
// simulated GPU's answers. Prints no addresses, so outputs compare exactly.
#include <cuda_runtime_api.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

namespace {

void Probe(const char* who) {
  int count = -1;
  cudaError_t e = cudaGetDeviceCount(&count);
  printf("%s: cudaGetDeviceCount=%d (%s) count=%d\n", who, e, cudaGetErrorName(e), count);
  void* p = nullptr;
  e = cudaMalloc(&p, 1 << 20);
  printf("%s: cudaMalloc=%d (%s) ptr=%s\n", who, e, cudaGetErrorName(e), p ? "set" : "null");
  size_t free_bytes = 0, total = 0;
  e = cudaMemGetInfo(&free_bytes, &total);
  printf("%s: cudaMemGetInfo=%d total=%zu\n", who, e, total);
  e = cudaFree(p);
  printf("%s: cudaFree=%d\n", who, e);
  e = cudaFree(p);
  printf("%s: cudaFree(again)=%d\n", who, e);
  cudaError_t peek = cudaPeekAtLastError();
  cudaError_t last = cudaGetLastError();
  cudaError_t after = cudaGetLastError();
  printf("%s: cudaPeekAtLastError=%d cudaGetLastError=%d cudaGetLastError=%d\n", who, peek, last,
         after);
  int version = -1;
  e = cudaDriverGetVersion(&version);
  printf("%s: cudaDriverGetVersion=%d version=%d\n", who, e, version);
  printf("%s: cudaGetErrorString(2)=%s\n", who, cudaGetErrorString(cudaErrorMemoryAllocation));
}

}  // namespace

int main() {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  Probe("parent");
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    Probe("child");
    fflush(stdout);
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  printf("parent: child exit status %d\n",
         WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  return 0;
}
