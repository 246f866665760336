/* driver_probe: calls the hooked CUDA driver functions directly, as a program
 * linked with -lcuda does, and prints their codes and how often each reached
 * the driver. Linked against the fake driver (fake_driver/fake_libcuda.c), so
 * the ctests compare its output with and without the preload (pass-through
 * must not change a code or add a driver call), and check what the simulated
 * GPU answers. Prints no addresses. */
#include <cuda.h>
#include <stdio.h>

int fake_driver_calls(const char* name);

typedef CUresult (*AllocFn)(CUdeviceptr*, size_t);

int main(void) {
  CUdeviceptr p = 0;
  size_t free_bytes = 0, total = 0;
  setvbuf(stdout, NULL, _IOLBF, 0);
  CUresult r = cuInit(0);
  printf("cuInit=%d\n", r);
  r = cuMemAlloc(&p, 1 << 20);
  printf("cuMemAlloc_v2=%d ptr=%s\n", r, p ? "set" : "null");
  r = cuMemGetInfo(&free_bytes, &total);
  printf("cuMemGetInfo_v2=%d total=%zu MiB free<=total=%d\n", r, total >> 20, free_bytes <= total);
  printf("cuMemFree_v2=%d\n", cuMemFree(p));
  printf("cuMemAlloc_v2(0 bytes)=%d\n", cuMemAlloc(&p, 0));
  printf("cuLaunchKernel=%d\n", cuLaunchKernel(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
  void* fn = NULL;
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  r = cuGetProcAddress("cuMemAlloc", &fn, 13000, 0, &status);
  printf("cuGetProcAddress_v2(cuMemAlloc)=%d status=%d\n", r, (int)status);
  if (fn != NULL) {
    CUdeviceptr q = 0;
    r = ((AllocFn)fn)(&q, 4096);
    printf("(handed-out cuMemAlloc)=%d ptr=%s\n", r, q ? "set" : "null");
    if (q) printf("cuMemFree_v2=%d\n", cuMemFree(q));
  }
  printf("driver calls: cuMemAlloc_v2=%d cuMemFree_v2=%d cuMemGetInfo_v2=%d cuLaunchKernel=%d\n",
         fake_driver_calls("cuMemAlloc_v2"), fake_driver_calls("cuMemFree_v2"),
         fake_driver_calls("cuMemGetInfo_v2"), fake_driver_calls("cuLaunchKernel"));
  return 0;
}
