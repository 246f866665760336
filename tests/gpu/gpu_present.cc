// gpu_present: exits 0 when a CUDA device answers, 77 (ctest's skip code for
// the GPU tests) with the reason on stderr when none does.
#include <cstdio>
#include <string>

#include "gpu_driver.h"

int main() {
  std::string why;
  if (kvtier::gpu_test::GpuDriver::Get(&why) != nullptr) return 0;
  fprintf(stderr, "gpu_present: %s; skipping\n", why.c_str());
  return 77;
}
