// Number, size, rate and time formatting for kvtier-top's views, so the
// curses screen, the text snapshot and the tests agree on every figure.
// Thread-safety: stateless functions.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/units.h"  // FormatBytesRounded: sizes in the views

namespace kvtier::top {

// At most 4 characters for table cells: "0", "512K", "1.5G", "80G", "1.0T".
std::string CompactBytes(uint64_t bytes);
// Decimal GB/s in at most 5 characters: "0.00", "12.3", "1234".
std::string GBps(double bytes_per_second);
// A per-second rate or a count in at most 5 characters: "120", "12.3k", "1.2M".
std::string Compact(double value);
// "12s", "5m03s", "1h02m", "3d04h".
std::string Duration(uint64_t ns);
// Local wall-clock time of a CLOCK_REALTIME instant: "17:30:01".
std::string ClockTime(uint64_t realtime_ns);
// Pads (or cuts) to exactly `width` columns, aligned left or right.
std::string Fit(const std::string& text, int width, bool right = false);
// `width` characters of '|' for `fraction` (0..1) of the width, spaces after.
std::string BarFill(double fraction, int width);

// Heat strip characters, cold to hot.
inline constexpr char kHeatChars[] = " .:-=+*#%@";
char HeatChar(uint8_t heat);
// What a view calls the tiers of one kind of process: a GPU backend's
// device, host and disk, or the host backend's resident memory (its blocks'
// mapped pages, and the pages staged on their way out) and SSD
// (stats::BackendOf says which kind a process is).
struct TierWords {
  const char* meter[3];   // the meters' labels: "Device", "Host", "Disk"
  const char* wide[3];    // the process table's columns: "DEVICE", "HOST", "DISK"
  const char* narrow[3];  // and on a narrow screen: "DEV", "HOST", "DISK"
  const char* name[4];    // by tier code of stats.h, "untouched" last
  char letter[4];         // the strips' letters: D H S .
  const char* promote;    // the moves up and down a tier: "promote", "demote"
  const char* demote;
  const char* promote_column;  // their columns: "PROMO", "DEMOT"
  const char* demote_column;
};
const TierWords& GpuTierWords();
const TierWords& HostTierWords();

}  // namespace kvtier::top
