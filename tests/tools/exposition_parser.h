// A strict parser of the Prometheus text exposition format 0.0.4, for the
// exporter tests: every line must be a HELP/TYPE comment, another comment,
// or `name{label="value",...} value [timestamp]`; a family's lines must form
// one group, with its TYPE before its samples. Thread-safety: value types.
#pragma once

#include <cmath>
#include <map>
#include <string>
#include <vector>

namespace kvtier::testing {

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;  // unescaped values
  double value = 0;
};

struct Exposition {
  std::map<std::string, std::string> help;  // unescaped
  std::map<std::string, std::string> type;
  std::vector<Sample> samples;
  // The value of `name` with label pid == `pid`; NaN if absent.
  double Value(const std::string& name, int pid) const {
    for (const Sample& s : samples) {
      auto it = s.labels.find("pid");
      if (s.name == name && it != s.labels.end() && it->second == std::to_string(pid))
        return s.value;
    }
    return NAN;
  }
};

// False (and *error names the line and why) unless every line is valid.
bool ParseExposition(const std::string& text, Exposition* out, std::string* error);

}  // namespace kvtier::testing
