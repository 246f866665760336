/* A stand-in for a CUDA 12 libcudart.so.12: the symbols whose ABI changed in
 * CUDA 13, with their CUDA 12 signatures and @libcudart.so.12 versions, plus
 * one symbol whose ABI did not change. cuda12_app links against it; under
 * the preload its old-signature calls must still reach this library. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

int cudaGetDeviceCount(int* count) {
  *count = 12;
  return 0;
}

int cudaMemAdvise(const void* ptr, size_t count, int advice, int device) {
  printf("fake libcudart.so.12: cudaMemAdvise(advice=%d, device=%d)\n", advice, device);
  return 0;
}

int cudaMemPrefetchAsync(const void* ptr, size_t count, int device, void* stream) {
  printf("fake libcudart.so.12: cudaMemPrefetchAsync(device=%d)\n", device);
  return 0;
}

/* CUDA 12's legacy cudaGetDeviceProperties fills a different struct layout. */
int cudaGetDeviceProperties(char* prop, int device) {
  strcpy(prop, "fake CUDA 12 device");
  return 0;
}
