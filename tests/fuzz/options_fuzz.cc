// Fuzz target: the KVTIER_* options parser (runtime/options.cc) and the
// KVTIER_DISK_FAULTS grammar. The input is an environment, one NAME=VALUE
// per line. Any input either parses or fails with a one-line message that
// names a variable; nothing crashes.
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "runtime/options.h"
#include "runtime/storage/fault_env.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::map<std::string, std::string> env;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(start, end - start);
    const size_t eq = line.find('=');
    if (eq != std::string_view::npos) env[std::string(line.substr(0, eq))] = line.substr(eq + 1);
    start = end + 1;
  }
  kvtier::Result<kvtier::Options> parsed =
      kvtier::ParseOptions([&env](const char* name) -> const char* {
        auto it = env.find(name);
        return it == env.end() ? nullptr : it->second.c_str();
      });
  if (!parsed.ok()) {
    const std::string message = parsed.status().message();
    FUZZ_CHECK(!message.empty());
    FUZZ_CHECK(message.find("KVTIER_") != std::string::npos);
  } else {
    const kvtier::Options& o = parsed.value();
    // KVTIER_DISK_FAULTS' own grammar, checked where the runtime starts.
    kvtier::Result<kvtier::FaultSpec> faults = kvtier::ParseFaultSpec(o.disk_faults);
    FUZZ_CHECK(faults.ok() || faults.status().message().find("(accepted: ") != std::string::npos);
    FUZZ_CHECK(o.page_size >= (64u << 10) && o.page_size <= (1u << 30) &&
               (o.page_size & (o.page_size - 1)) == 0);
  }
  return 0;
}
