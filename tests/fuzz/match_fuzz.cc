// Fuzz target: the KVTIER_MATCH grammar (runtime/match.cc, allocation_matcher.cc).
// The first line is the rule; every 8 bytes after it are one allocation
// (size, caller library) decided in order. Any rule either parses or fails
// with a message that shows the accepted form; Decide never crashes.
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "runtime/allocation_matcher.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const size_t nl = text.find('\n');
  const std::string_view rule = text.substr(0, nl);
  kvtier::Result<kvtier::AllocationMatcher> parsed = kvtier::AllocationMatcher::Parse(rule);
  if (!parsed.ok()) {
    FUZZ_CHECK(parsed.status().message().find("accepted") != std::string::npos);
    return 0;
  }
  kvtier::AllocationMatcher& matcher = parsed.value();
  FUZZ_CHECK(matcher.alternatives() >= 1);
  static const char* const kLibs[] = {"", "/usr/lib/libggml-cuda.so", "libtorch_cuda.so",
                                      "/opt/vllm/_C.abi3.so"};
  std::string_view rest = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
  for (uint64_t index = 0; rest.size() >= 8 && index < 4096; ++index, rest.remove_prefix(8)) {
    uint64_t word;
    memcpy(&word, rest.data(), 8);
    const uint64_t bytes = word >> 2;  // up to 2^62
    kvtier::CallSite site(kLibs[word & 3], {"_ZN14llama_kv_cacheC2Ev", "ggml_aligned_malloc"});
    const kvtier::AllocationMatcher::Decision d = matcher.Decide(bytes, index, site);
    FUZZ_CHECK(d.alternative < static_cast<int>(matcher.alternatives()));
    FUZZ_CHECK(d.tier == (d.alternative >= 0));
  }
  return 0;
}
