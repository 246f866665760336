// The PTX kernels of kvtier's GPU measurements (tools/bench/gpu_kernels.h)
// assemble with the toolkit's ptxas, for the oldest GPU CUDA 13 compiles for
// (sm_75; the PTX itself declares sm_52, which older toolkits' drivers
// take) and for the H200's (sm_90), so a mistake in them shows here rather
// than only on a lent GPU. No GPU needed (label cuda); skips where the toolkit has no
// ptxas.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "tools/bench/gpu_kernels.h"

namespace kvtier {
namespace {

TEST(GpuKernels, EveryKernelAssemblesWithPtxas) {
  const std::string ptxas = KVTIER_PTXAS;
  if (ptxas.empty() || access(ptxas.c_str(), X_OK) != 0) {
    GTEST_SKIP() << "no ptxas in this CUDA toolkit (" << ptxas << ")";
  }
  char dir[] = "/tmp/kvtier-ptx.XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const struct {
    const char* name;
    const char* ptx;
  } kernels[] = {{"touch", bench::kTouchPtx}, {"page_sums", bench::kPageSumsPtx}};
  for (const auto& k : kernels) {
    const std::string src = std::string(dir) + "/" + k.name + ".ptx";
    FILE* f = fopen(src.c_str(), "w");
    ASSERT_NE(f, nullptr);
    fputs(k.ptx, f);
    fclose(f);
    for (const char* arch : {"sm_75", "sm_90"}) {
      const std::string cmd =
          ptxas + " -arch=" + arch + " -o " + dir + "/out.cubin " + src + " 2>&1";
      FILE* p = popen(cmd.c_str(), "r");
      ASSERT_NE(p, nullptr);
      std::string out;
      char buf[256];
      while (fgets(buf, sizeof buf, p) != nullptr) out += buf;
      EXPECT_EQ(pclose(p), 0) << k.name << " for " << arch << ":\n" << out;
    }
    remove(src.c_str());
  }
  remove((std::string(dir) + "/out.cubin").c_str());
  rmdir(dir);
}

}  // namespace
}  // namespace kvtier
