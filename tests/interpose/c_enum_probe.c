/* c_enum_probe: a C program passing integers the CUDA API declares as enums,
 * including values outside every enumerator (legal in C, and what ctypes
 * callers send). On the simulated GPU each call must fail cleanly with
 * libcudart's code; run under UBSan this also shows the hooks never load an
 * out-of-range enum value. Prints one line per call. */
#include <cuda_runtime_api.h>
#include <stdio.h>

int main(void) {
  void* p = NULL;
  int value = 0;
  struct cudaMemLocation device = {cudaMemLocationTypeDevice, 0};
  struct cudaMemLocation bogus = {(enum cudaMemLocationType)77, 0};
  printf("cudaMalloc=%d\n", cudaMalloc(&p, 4096));
  printf("cudaMemcpy(kind 9)=%d\n", cudaMemcpy(p, p, 16, (enum cudaMemcpyKind)9));
  printf("cudaMemAdvise(advice 42)=%d\n", cudaMemAdvise(p, 16, (enum cudaMemoryAdvise)42, device));
  printf("cudaMemPrefetchAsync(location type 77)=%d\n", cudaMemPrefetchAsync(p, 16, bogus, 0, 0));
  printf("cudaDeviceGetAttribute(attr 100000)=%d\n",
         cudaDeviceGetAttribute(&value, (enum cudaDeviceAttr)100000, 0));
  printf("cudaGetErrorName(12345)=%s\n", cudaGetErrorName((cudaError_t)12345));
  printf("cudaFree=%d\n", cudaFree(p));
  return 0;
}
