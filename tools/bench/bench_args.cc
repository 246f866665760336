// Flags (see bench_args.h).
#include "tools/bench/bench_args.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "runtime/units.h"

namespace kvtier::bench {

Flags& Flags::Add(const char* name, bool takes_value,
                  std::function<Status(const std::string&)> set) {
  flags_.push_back({name, takes_value, std::move(set)});
  return *this;
}

const Flags::Flag* Flags::Find(const std::string& name) const {
  for (const Flag& f : flags_) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

Flags& Flags::Switch(const char* name, std::function<void()> on) {
  return Add(name, false, [on = std::move(on)](const std::string&) {
    on();
    return Status::Ok();
  });
}

Flags& Flags::Switch(const char* name, bool* out, bool value) {
  return Switch(name, [out, value] { *out = value; });
}

Flags& Flags::Text(const char* name, std::string* out) {
  return Add(name, true, [out](const std::string& v) {
    if (v.empty()) return Status::Error("empty value");
    *out = v;
    return Status::Ok();
  });
}

Flags& Flags::Choice(const char* name, std::vector<std::string> choices,
                     std::function<void(const std::string&)> set) {
  return Add(name, true,
             [choices = std::move(choices), set = std::move(set)](const std::string& v) {
               std::string list;
               for (const std::string& c : choices) {
                 if (c == v) {
                   set(v);
                   return Status::Ok();
                 }
                 list += (list.empty() ? "" : ", ") + c;
               }
               return Status::Error("use one of " + list);
             });
}

Flags& Flags::Integer(const char* name, int64_t min, int64_t max,
                      std::function<void(int64_t)> set) {
  return Add(name, true, [min, max, set = std::move(set)](const std::string& v) {
    char* end = nullptr;
    errno = 0;
    const long long n = strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || errno == ERANGE || n < min || n > max) {
      return max >= std::numeric_limits<int32_t>::max()
                 ? Status::Errorf("expected a whole number >= %lld", static_cast<long long>(min))
                 : Status::Errorf("expected a whole number from %lld to %lld",
                                  static_cast<long long>(min), static_cast<long long>(max));
    }
    set(n);
    return Status::Ok();
  });
}

Flags& Flags::Number(const char* name, double* out) {
  return Add(name, true, [out](const std::string& v) {
    char* end = nullptr;
    const double d = strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0' || !std::isfinite(d) || d < 0) {
      return Status::Error("expected a number >= 0");
    }
    *out = d;
    return Status::Ok();
  });
}

Flags& Flags::Size(const char* name, uint64_t min, std::function<void(uint64_t)> set) {
  return Add(name, true, [min, set = std::move(set)](const std::string& v) {
    Result<uint64_t> r = ParseSize(v);
    if (!r.ok()) return r.status();
    if (r.value() < min) return Status::Error("at least " + FormatBytes(min));
    set(r.value());
    return Status::Ok();
  });
}

Flags& Flags::Custom(const char* name, std::function<Status(const std::string&)> set) {
  return Add(name, true, std::move(set));
}

Status Flags::Parse(int argc, char** argv, bool* help) const {
  // -h or --help where a flag may stand (not as another flag's value) asks
  // for the usage, wherever it is.
  *help = false;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      *help = true;
      return Status::Ok();
    }
    const Flag* flag = Find(argv[i]);  // "--flag=value" names no flag: nothing to skip
    if (flag != nullptr && flag->takes_value) ++i;
  }
  for (int i = 1; i < argc; ++i) {
    std::string name = argv[i];
    std::string value;
    const size_t eq = name.find('=');
    const bool inline_value = name.rfind("--", 0) == 0 && eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name.resize(eq);
    }
    const Flag* flag = Find(name);
    if (flag == nullptr) {
      if (name.empty() || name[0] != '-') {
        return Status::Error(EchoValue(name) + ": unexpected argument (see --help)");
      }
      return Status::Error("unknown option " + EchoValue(name) + " (see --help)");
    }
    if (!flag->takes_value) {
      if (inline_value) return Status::Error(name + " takes no value");
    } else if (!inline_value) {
      if (i + 1 >= argc) return Status::Error(name + " needs a value");
      value = argv[++i];
    }
    if (Status s = flag->set(value); !s.ok()) {
      return Status::Error(name + (flag->takes_value ? "=" + EchoValue(value) : "") + ": " +
                           s.message());
    }
  }
  return Status::Ok();
}

bool Flags::ParseOrExit(int argc, char** argv, const char* usage, int* exit_code) const {
  bool help = false;
  const Status s = Parse(argc, argv, &help);
  if (help) {
    fputs(usage, stdout);
    *exit_code = 0;
    return false;
  }
  if (!s.ok()) {
    *exit_code = Fail(s.message());
    return false;
  }
  return true;
}

int Flags::Fail(const std::string& message) const {
  fprintf(stderr, "kvtier-bench %s: %s\n", command_.c_str(), message.c_str());
  return 2;
}

}  // namespace kvtier::bench
