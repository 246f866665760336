// cudart_probe: calls a few CUDA runtime functions and prints their return
// codes, then does the same in a forked child. Built against the real
// libcudart; the interposer tests compare its output with and without the
// preload (pass-through must not change a single code: no driver, or the fake
// driver) and check the simulated GPU's answers. Covers every allocation hook
// (cudaMalloc, cudaMallocAsync, cudaMallocManaged and their frees) and the
// driver entry points (cudaGetDriverEntryPoint[ByVersion]). Prints no
// addresses, so outputs compare exactly.
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
  cudaGetLastError();

  void* a = nullptr;
  e = cudaMallocAsync(&a, 1 << 20, nullptr);
  printf("%s: cudaMallocAsync=%d (%s) ptr=%s\n", who, e, cudaGetErrorName(e), a ? "set" : "null");
  e = cudaFreeAsync(a, nullptr);
  printf("%s: cudaFreeAsync=%d\n", who, e);
  void* m = nullptr;
  e = cudaMallocManaged(&m, 1 << 20, cudaMemAttachGlobal);
  printf("%s: cudaMallocManaged=%d (%s) ptr=%s\n", who, e, cudaGetErrorName(e), m ? "set" : "null");
  e = cudaMallocManaged(&m, 0, cudaMemAttachGlobal);
  printf("%s: cudaMallocManaged(0 bytes)=%d\n", who, e);
  e = cudaFree(m);
  printf("%s: cudaFree(managed)=%d\n", who, e);
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
  e = cudaGetDriverEntryPointByVersion("cuMemAlloc", &fn, 13000, cudaEnableDefault, &status);
  printf("%s: cudaGetDriverEntryPointByVersion(cuMemAlloc)=%d status=%d fn=%s\n", who, e,
         static_cast<int>(status), fn ? "set" : "null");
  fn = nullptr;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  e = cudaGetDriverEntryPoint("cuGraphCreate", &fn, cudaEnableDefault, &status);
#pragma GCC diagnostic pop
  printf("%s: cudaGetDriverEntryPoint(cuGraphCreate)=%d status=%d fn=%s\n", who, e,
         static_cast<int>(status), fn ? "set" : "null");
  last = cudaGetLastError();
  printf("%s: cudaGetLastError=%d\n", who, last);
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
