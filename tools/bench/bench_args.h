// Command-line helpers shared by the kvtier-bench subcommands.
// Thread-safety: pure functions.
#pragma once

#include <string>

namespace kvtier::bench {

// Splits argv[*i] into its flag and value: "--flag=value", or "--flag" with
// the value in the next argument (then *i moves past it). False when the
// value is missing.
inline bool FlagValue(int argc, char** argv, int* i, std::string* flag, std::string* value) {
  *flag = argv[*i];
  if (size_t eq = flag->find('='); eq != std::string::npos) {
    *value = flag->substr(eq + 1);
    flag->resize(eq);
    return true;
  }
  if (*i + 1 >= argc) return false;
  *value = argv[++*i];
  return true;
}

}  // namespace kvtier::bench
