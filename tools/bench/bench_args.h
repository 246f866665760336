// Flags: the one command-line parser of the kvtier-bench subcommands.
//
// A command declares each flag with where its value goes and what it
// accepts; Parse reads argv against them, in order (a repeated flag: the last
// one wins). "--flag value" and "--flag=value" both work. Every error is one
// line that names the flag and echoes the value:
//   kvtier-bench spill: --qd=0: expected a whole number from 1 to 256
//   kvtier-bench calibrate: --out needs a value
//   kvtier-bench multiround: unknown option --bogus (see --help)
// Checks that span flags stay with the command, after Parse.
// Thread-safety: one thread builds and parses.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "runtime/status.h"

namespace kvtier::bench {

class Flags {
 public:
  // `command` names the subcommand in messages ("spill").
  explicit Flags(std::string command) : command_(std::move(command)) {}

  // A flag without a value.
  Flags& Switch(const char* name, std::function<void()> on);
  Flags& Switch(const char* name, bool* out, bool value = true);
  // Any text but the empty one.
  Flags& Text(const char* name, std::string* out);
  // One of `choices`, as written; `set` gets it.
  Flags& Choice(const char* name, std::vector<std::string> choices,
                std::function<void(const std::string&)> set);
  Flags& Choice(const char* name, std::string* out, std::vector<std::string> choices) {
    return Choice(name, std::move(choices), [out](const std::string& v) { *out = v; });
  }
  // A whole number in [min, max].
  Flags& Integer(const char* name, int64_t min, int64_t max, std::function<void(int64_t)> set);
  template <typename T>
  Flags& Integer(const char* name, T* out, int64_t min,
                 int64_t max = std::numeric_limits<int32_t>::max()) {
    return Integer(name, min, max, [out](int64_t v) { *out = static_cast<T>(v); });
  }
  // A finite number >= 0.
  Flags& Number(const char* name, double* out);
  // A size as KVTIER_* options take it (ParseSize: 64K, 2M, 1536M), at least `min`.
  Flags& Size(const char* name, uint64_t min, std::function<void(uint64_t)> set);
  template <typename T>
  Flags& Size(const char* name, T* out, uint64_t min = 0) {
    return Size(name, min, [out](uint64_t v) { *out = static_cast<T>(v); });
  }
  // Anything else: `set` checks and stores the value; its error says why.
  Flags& Custom(const char* name, std::function<Status(const std::string& value)> set);

  // Parses argv[1..argc). Sets *help (and stores nothing more) on -h or
  // --help; otherwise fails with the message of the first bad argument,
  // without the "kvtier-bench <command>: " prefix.
  Status Parse(int argc, char** argv, bool* help) const;
  // Parse for a command's entry point: true to run on; false with *exit_code
  // 0 after printing `usage` to stdout (--help), or 2 after printing the
  // error as one line on stderr.
  bool ParseOrExit(int argc, char** argv, const char* usage, int* exit_code) const;
  // "kvtier-bench <command>: <message>" on stderr; returns 2 (for checks a
  // command makes after Parse).
  int Fail(const std::string& message) const;

 private:
  struct Flag {
    std::string name;
    bool takes_value = true;
    std::function<Status(const std::string& value)> set;  // value is "" for a switch
  };
  Flags& Add(const char* name, bool takes_value, std::function<Status(const std::string&)> set);
  const Flag* Find(const std::string& name) const;

  std::string command_;
  std::vector<Flag> flags_;
};

}  // namespace kvtier::bench
