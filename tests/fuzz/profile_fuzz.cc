// Fuzz target: kvtier-bench's hardware profile loader (LoadProfile in
// tools/bench/hw_profile.cc) on an arbitrary file. It loads a profile whose
// every figure is a finite non-negative number with a source, or fails
// with a message naming the file; nothing crashes or throws.
#include <stdlib.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <string>

#include "tests/fuzz/fuzz_check.h"
#include "tools/bench/hw_profile.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = [] {
    char tmpl[] = "/tmp/kvtier-fuzz-profile.XXXXXX";
    const char* made = mkdtemp(tmpl);
    FUZZ_CHECK(made != nullptr);
    return std::string(made);
  }();
  const std::string path = dir + "/fuzzed.json";
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    FUZZ_CHECK(out.good());
  }
  kvtier::Result<kvtier::bench::HardwareProfile> loaded = kvtier::bench::LoadProfile(path, dir);
  if (loaded.ok()) {
    const kvtier::bench::HardwareProfile& p = loaded.value();
    FUZZ_CHECK(p.gpu_memory_bytes > 0 && std::isfinite(p.gpu_memory_bytes));
    FUZZ_CHECK(p.gpu_memory_utilization > 0 && p.gpu_memory_utilization <= 1);
    (void)kvtier::bench::ProfileJson(p);
  } else {
    FUZZ_CHECK(loaded.status().message().find(path) != std::string::npos);
  }
  unlink(path.c_str());
  return 0;
}
