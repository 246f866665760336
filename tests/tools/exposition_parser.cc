// A strict parser of the Prometheus text format 0.0.4 (see exposition_parser.h).
#include "tests/tools/exposition_parser.h"

#include <cctype>
#include <cstdlib>
#include <set>
#include <sstream>

namespace kvtier::testing {
namespace {

bool IsNameStart(char c) { return isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':'; }
bool IsNameChar(char c) { return IsNameStart(c) || isdigit(static_cast<unsigned char>(c)); }

bool ParseName(const std::string& s, size_t* i, std::string* name, bool label) {
  const size_t start = *i;
  if (*i >= s.size() || !IsNameStart(s[*i]) || (label && s[*i] == ':')) return false;
  while (*i < s.size() && IsNameChar(s[*i]) && !(label && s[*i] == ':')) ++*i;
  *name = s.substr(start, *i - start);
  return true;
}

bool ParseValue(const std::string& text, double* v) {
  if (text == "+Inf") return *v = INFINITY, true;
  if (text == "-Inf") return *v = -INFINITY, true;
  if (text == "NaN") return *v = NAN, true;
  char* end = nullptr;
  *v = strtod(text.c_str(), &end);
  return !text.empty() && *end == '\0' && text.find_first_of("xXiInN") == std::string::npos;
}

}  // namespace

bool ParseExposition(const std::string& text, Exposition* out, std::string* error) {
  if (text.empty() || text.back() != '\n') return *error = "does not end with a newline", false;
  std::istringstream in(text);
  std::string line;
  int n = 0;
  std::set<std::string> finished;  // families whose group of lines ended
  std::string current;             // the family being listed
  auto family = [&](const std::string& name) {
    if (name != current) {
      if (!current.empty()) finished.insert(current);
      current = name;
    }
    return finished.count(name) == 0;
  };
  while (std::getline(in, line)) {
    ++n;
    auto fail = [&](const std::string& why) {
      *error = "line " + std::to_string(n) + ": " + why + ": " + line;
      return false;
    };
    if (line.empty()) continue;
    if (line[0] == '#') {
      std::istringstream words(line);
      std::string hash, kind, name;
      words >> hash >> kind >> name;
      if (hash != "#" || (kind != "HELP" && kind != "TYPE")) continue;  // a plain comment
      size_t i = 0;
      std::string parsed;
      if (!ParseName(name, &i, &parsed, false) || i != name.size()) return fail("bad metric name");
      if (!family(name)) return fail("family listed in two groups");
      const size_t rest_at = line.find(name, 2 + kind.size()) + name.size();
      std::string rest = rest_at < line.size() ? line.substr(rest_at + 1) : "";
      if (kind == "TYPE") {
        static const std::set<std::string> kTypes = {"counter", "gauge", "histogram", "summary",
                                                     "untyped"};
        if (kTypes.count(rest) == 0) return fail("bad type");
        if (out->type.count(name) != 0) return fail("second TYPE");
        bool seen = false;
        for (const Sample& s : out->samples) seen |= s.name == name;
        if (seen) return fail("TYPE after samples");
        out->type[name] = rest;
      } else {
        if (out->help.count(name) != 0) return fail("second HELP");
        std::string help;
        for (size_t k = 0; k < rest.size(); ++k) {
          if (rest[k] != '\\') {
            help += rest[k];
          } else if (k + 1 < rest.size() && (rest[k + 1] == '\\' || rest[k + 1] == 'n')) {
            help += rest[++k] == 'n' ? '\n' : '\\';
          } else {
            return fail("bad escape in HELP");
          }
        }
        out->help[name] = help;
      }
      continue;
    }
    Sample s;
    size_t i = 0;
    if (!ParseName(line, &i, &s.name, false)) return fail("bad metric name");
    if (!family(s.name)) return fail("family listed in two groups");
    if (i < line.size() && line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        std::string label;
        if (!ParseName(line, &i, &label, true)) return fail("bad label name");
        if (line.compare(i, 2, "=\"") != 0) return fail("expected =\"");
        i += 2;
        std::string value;
        while (i < line.size() && line[i] != '"') {
          if (line[i] == '\\') {
            if (i + 1 >= line.size()) return fail("bad escape");
            const char e = line[i + 1];
            if (e == '\\' || e == '"') {
              value += e;
            } else if (e == 'n') {
              value += '\n';
            } else {
              return fail("bad escape in label value");
            }
            i += 2;
          } else {
            value += line[i++];
          }
        }
        if (i >= line.size()) return fail("unterminated label value");
        ++i;  // the closing quote
        if (!s.labels.emplace(label, value).second) return fail("duplicate label");
        if (i < line.size() && line[i] == ',') ++i;
      }
      if (i >= line.size()) return fail("unterminated labels");
      ++i;  // '}'
    }
    if (i >= line.size() || line[i] != ' ') return fail("expected a space before the value");
    std::istringstream rest(line.substr(i + 1));
    std::string value, timestamp, extra;
    rest >> value >> timestamp >> extra;
    if (!ParseValue(value, &s.value)) return fail("bad value");
    if (!timestamp.empty() && timestamp.find_first_not_of("-0123456789") != std::string::npos) {
      return fail("bad timestamp");
    }
    if (!extra.empty()) return fail("trailing data");
    out->samples.push_back(std::move(s));
  }
  return true;
}

}  // namespace kvtier::testing
