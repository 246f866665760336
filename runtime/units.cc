// Units and values as people write and read them (see units.h).
#include "runtime/units.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iterator>

namespace kvtier {
namespace {

constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

Result<uint64_t> ParseSize(std::string_view text) {
  if (text.empty()) return Status::Error("empty value");
  if (text.front() == '-') return Status::Error("negative size");
  uint64_t number = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), number);
  if (end == text.data()) return Status::Error("not a size");
  if (ec == std::errc::result_out_of_range) return Status::Error("too large");
  std::string_view suffix(end, text.data() + text.size() - end);
  if (suffix.size() >= 2 && (suffix[0] == '.' || suffix[0] == ',') &&
      std::isdigit(static_cast<unsigned char>(suffix[1]))) {
    return Status::Error("not a whole number (write 1536M, not 1.5G)");
  }
  static constexpr struct {
    std::string_view suffix;
    int shift;
  } kSuffixes[] = {{"", 0},     {"b", 0},   {"k", 10},   {"kb", 10}, {"kib", 10},
                   {"m", 20},   {"mb", 20}, {"mib", 20}, {"g", 30},  {"gb", 30},
                   {"gib", 30}, {"t", 40},  {"tb", 40},  {"tib", 40}};
  const std::string lower = Lower(suffix);
  for (const auto& s : kSuffixes) {
    if (lower != s.suffix) continue;
    if (s.shift > 0 && number > (UINT64_MAX >> s.shift)) return Status::Error("too large");
    return number << s.shift;
  }
  return Status::Error("unknown size suffix \"" + EchoValue(suffix) +
                       "\" (use K, M, G or T, optionally with B or iB)");
}

std::string FormatBytes(uint64_t bytes) {
  if (bytes < 1024) return std::to_string(bytes) + " B";
  size_t unit = 0;
  while (unit + 1 < std::size(kUnits) && bytes >> (10 * (unit + 1)) != 0) ++unit;
  // Two decimals at most; 1023.999 KiB rounds up into the next unit.
  auto rounded = [bytes](size_t u) {
    return std::round(std::ldexp(static_cast<double>(bytes), -10 * static_cast<int>(u)) * 100) /
           100;
  };
  double value = rounded(unit);
  if (value >= 1024 && unit + 1 < std::size(kUnits)) value = rounded(++unit);
  char buf[32];
  snprintf(buf, sizeof buf, "%.2f", value);
  std::string number = buf;
  number.erase(number.find_last_not_of('0') + 1);
  if (number.back() == '.') number.pop_back();
  return number + " " + kUnits[unit];
}

std::string FormatBytesRounded(uint64_t bytes) {
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double v = static_cast<double>(bytes);
  int unit = 0;
  // Move up a unit before rounding could print "1024 KiB".
  while (v >= 999.5 && unit < 6) {
    v /= 1024;
    ++unit;
  }
  char buf[32];
  if (v < 9.995) {
    snprintf(buf, sizeof buf, "%.2f %s", v, kUnits[unit]);
  } else if (v < 99.95) {
    snprintf(buf, sizeof buf, "%.1f %s", v, kUnits[unit]);
  } else {
    snprintf(buf, sizeof buf, "%.0f %s", v, kUnits[unit]);
  }
  return buf;
}

std::string EchoValue(std::string_view text) {
  constexpr size_t kMax = 64;
  std::string out;
  size_t cut = 0;  // the length of `out` before the first piece past kMax - 3
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    char piece[5] = {ch, '\0'};
    if (c < 0x20 || c >= 0x7f) snprintf(piece, sizeof piece, "\\x%02x", c);
    if (out.size() + strlen(piece) <= kMax - 3) cut = out.size() + strlen(piece);
    out += piece;
    if (out.size() > kMax) break;
  }
  if (out.size() <= kMax) return out;
  out.resize(cut);
  return out + "...";
}

}  // namespace kvtier
