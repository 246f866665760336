// Layout: what kvtier-top shows, as lines of styled text, built from a Model
// for a given width. The curses view paints these lines with colours; the
// --once snapshot prints the same lines as plain text, so both always show
// the same figures. layout.cc builds the header and the process table,
// detail.cc the per-process detail view.
// Thread-safety: stateless functions over values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tools/top/collector.h"
#include "tools/top/format.h"

namespace kvtier::top {

enum class Style : uint8_t {
  kNormal,
  kTitle,         // the first line
  kLabel,         // "Device", "Faults", ...
  kColumnHeader,  // the table's header row
  kSortColumn,    // the column the table is sorted by
  kDevice,        // tier colours, in tier-code order (stats.h)
  kHost,
  kDisk,
  kUntouched,
  kDim,
  kWarn,
  kError,
  kSelected,  // the selected row of the process table
};
// The style of tier code 0..3 (device, host, disk, untouched).
Style TierStyle(uint8_t tier);

struct Span {
  std::string text;
  Style style = Style::kNormal;
};

struct Line {
  std::vector<Span> spans;
  Style fill = Style::kNormal;  // the style of the row past the last span
  Line& Add(std::string text, Style style = Style::kNormal);
  std::string Text() const;
  int Width() const;
};

enum class SortKey {
  kPid,
  kDevice,
  kHost,
  kDisk,
  kPromote,
  kDemote,
  kSpill,
  kRestore,
  kFaults,
  kErrors
};
// The key's column title, in the tier words given.
const char* SortKeyName(SortKey key, const TierWords& words = GpuTierWords());
SortKey NextSortKey(SortKey key);
// Processes in display order: pid ascending, every other key descending
// (ties by pid).
std::vector<const Process*> SortedProcesses(const Model& model, SortKey key);

struct ViewOptions {
  int width = 80;
  SortKey sort = SortKey::kPid;
  double delay_s = 1.0;       // the refresh tick, or the rate interval of a snapshot
  bool snapshot = false;      // --once: the title speaks of the rate interval
  bool all_problems = false;  // every problem in full (text) or one summary line
  bool tier_letters = false;  // a row of tier letters under each heat strip
};

// Title, the machine's tier meters, total rates, problems.
std::vector<Line> HeaderLines(const Model& model, const ViewOptions& options);
// The tier words of one process (its backend's), and of a model's view:
// the host backend's when every process shown is one.
const TierWords& ProcessWords(const Process& process);
const TierWords& ModelWords(const Model& model);
// The process table's header row (its tier columns in `words`) and one row
// per process.
Line TableHeader(const ViewOptions& options, const TierWords& words = GpuTierWords());
Line ProcessRow(const Process& process, const ViewOptions& options);
// Everything about one process: identity, meters, counters, regions with
// heat strips, recent events, and every raw field.
std::vector<Line> DetailLines(const Process& process, const Model& model,
                              const ViewOptions& options);
// The whole --once snapshot: header, table, then every process in detail.
std::string RenderText(const Model& model, const ViewOptions& options);

// Shared by layout.cc and detail.cc: "Device [|||   ] 1.00 GiB / 4.00 GiB".
Line TierMeter(const char* label, uint8_t tier, uint64_t used, uint64_t budget, int width,
               const std::string& suffix = "");

}  // namespace kvtier::top
