/* A program built against a CUDA 12 runtime (cuda12/fake_cudart12.c). Under
 * LD_PRELOAD=libkvtier.so KVTIER_BACKEND=sim, cudaGetDeviceCount (same ABI in
 * 12 and 13) is served by the simulated GPU, while the calls whose ABI
 * changed in CUDA 13 still reach the program's own runtime. */
#include <stddef.h>
#include <stdio.h>

int cudaGetDeviceCount(int* count);
int cudaMemAdvise(const void* ptr, size_t count, int advice, int device);
int cudaMemPrefetchAsync(const void* ptr, size_t count, int device, void* stream);
int cudaGetDeviceProperties(char* prop, int device);

int main(void) {
  int count = -1;
  int e = cudaGetDeviceCount(&count);
  printf("cudaGetDeviceCount=%d count=%d\n", e, count);
  static char buf[64]; /* smaller than CUDA 13's cudaDeviceProp */
  char prop[64];
  e = cudaGetDeviceProperties(prop, 0);
  printf("cudaGetDeviceProperties=%d name=%s\n", e, prop);
  printf("cudaMemAdvise=%d\n", cudaMemAdvise(buf, sizeof buf, 1, 3));
  printf("cudaMemPrefetchAsync=%d\n", cudaMemPrefetchAsync(buf, sizeof buf, 3, NULL));
  return 0;
}
