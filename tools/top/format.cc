// Formatting helpers for kvtier-top (see format.h).
#include "tools/top/format.h"

#include <time.h>

#include <cmath>
#include <cstdio>

namespace kvtier::top {
namespace {

constexpr char kShortUnits[] = "BKMGTPE";

}  // namespace

std::string CompactBytes(uint64_t bytes) {
  if (bytes == 0) return "0";
  double v = static_cast<double>(bytes);
  int unit = 0;
  while (v >= 999.5 && unit < 6) {
    v /= 1024;
    ++unit;
  }
  char buf[16];
  if (unit == 0) {
    snprintf(buf, sizeof buf, "%.0f", v);
  } else if (v < 9.95) {
    snprintf(buf, sizeof buf, "%.1f%c", v, kShortUnits[unit]);
  } else {
    snprintf(buf, sizeof buf, "%.0f%c", v, kShortUnits[unit]);
  }
  return buf;
}

std::string GBps(double bytes_per_second) {
  const double v = bytes_per_second / 1e9;
  char buf[32];
  if (!(v >= 0)) return "-";
  if (v < 9.995) {
    snprintf(buf, sizeof buf, "%.2f", v);
  } else if (v < 99.95) {
    snprintf(buf, sizeof buf, "%.1f", v);
  } else if (v < 99999.5) {
    snprintf(buf, sizeof buf, "%.0f", v);
  } else {
    return ">99k";
  }
  return buf;
}

std::string Compact(double value) {
  if (!(value >= 0)) return "-";
  char buf[32];
  if (value < 9999.5) {
    snprintf(buf, sizeof buf, "%.0f", value);
    return buf;
  }
  const char* suffix = "kMGTPE";
  double v = value / 1000;
  int i = 0;
  while (v >= 999.5 && i < 5) {
    v /= 1000;
    ++i;
  }
  if (v < 99.95) {
    snprintf(buf, sizeof buf, "%.1f%c", v, suffix[i]);
  } else {
    snprintf(buf, sizeof buf, "%.0f%c", v, suffix[i]);
  }
  return buf;
}

std::string Duration(uint64_t ns) {
  const uint64_t s = ns / 1000000000u;
  char buf[32];
  if (s < 60) {
    snprintf(buf, sizeof buf, "%llus", static_cast<unsigned long long>(s));
  } else if (s < 3600) {
    snprintf(buf, sizeof buf, "%llum%02llus", static_cast<unsigned long long>(s / 60),
             static_cast<unsigned long long>(s % 60));
  } else if (s < 86400) {
    snprintf(buf, sizeof buf, "%lluh%02llum", static_cast<unsigned long long>(s / 3600),
             static_cast<unsigned long long>(s / 60 % 60));
  } else {
    snprintf(buf, sizeof buf, "%llud%02lluh", static_cast<unsigned long long>(s / 86400),
             static_cast<unsigned long long>(s / 3600 % 24));
  }
  return buf;
}

std::string ClockTime(uint64_t realtime_ns) {
  const time_t t = static_cast<time_t>(realtime_ns / 1000000000u);
  struct tm tm;
  if (localtime_r(&t, &tm) == nullptr) return "--:--:--";
  char buf[16];
  strftime(buf, sizeof buf, "%H:%M:%S", &tm);
  return buf;
}

std::string Fit(const std::string& text, int width, bool right) {
  if (width <= 0) return "";
  const size_t w = static_cast<size_t>(width);
  if (text.size() >= w) return text.substr(0, w);
  const std::string pad(w - text.size(), ' ');
  return right ? pad + text : text + pad;
}

std::string BarFill(double fraction, int width) {
  if (width <= 0) return "";
  if (!(fraction > 0)) fraction = 0;
  if (fraction > 1) fraction = 1;
  int filled = static_cast<int>(std::lround(fraction * width));
  if (filled == 0 && fraction > 0) filled = 1;  // something is there: show it
  return std::string(filled, '|') + std::string(width - filled, ' ');
}

char HeatChar(uint8_t heat) { return kHeatChars[heat * (sizeof kHeatChars - 1) / 256]; }

const TierWords& GpuTierWords() {
  static const TierWords kWords = {{"Device", "Host", "Disk"},
                                   {"DEVICE", "HOST", "DISK"},
                                   {"DEV", "HOST", "DISK"},
                                   {"device", "host", "disk", "untouched"},
                                   {'D', 'H', 'S', '.'},
                                   "promote",
                                   "demote",
                                   "PROMO",
                                   "DEMOT"};
  return kWords;
}

const TierWords& HostTierWords() {
  // Its resident memory is the engine's blocks mapped in memory and the
  // pages unmapped and waiting for their SSD write (staging); then the SSD.
  static const TierWords kWords = {{"Mapped", "Staging", "SSD"},
                                   {"MAPPED", "STAGING", "SSD"},
                                   {"MAP", "STG", "SSD"},
                                   {"mapped", "staging", "SSD", "untouched"},
                                   {'M', 'G', 'S', '.'},
                                   "remap",
                                   "unmap",
                                   "REMAP",
                                   "UNMAP"};
  return kWords;
}

}  // namespace kvtier::top
