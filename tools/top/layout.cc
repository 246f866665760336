// Header, process table and the text snapshot (see layout.h).
#include "tools/top/layout.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "tools/stats/stats_fields.h"
#include "tools/top/format.h"

namespace kvtier::top {
namespace {

// The process table. Fixed columns keep their width; the command and the
// three tier cells share what is left. Tier cells grow from "37%" to
// "1.5G/4.0G" to a bar with the figures as the terminal widens; at 80
// columns everything fits with percentages.
constexpr int kPidWidth = 7;
constexpr int kBackendWidth = 4;
constexpr int kPolicyWidth = 6;
constexpr int kRateWidth = 5;
constexpr int kErrorWidth = 4;
constexpr int kRateColumns = 5;  // promote, demote, spill, restore, faults/s
constexpr int kColumnCount = 13;
constexpr int kFixedWidth = kPidWidth + kBackendWidth + kPolicyWidth + kRateColumns * kRateWidth +
                            kErrorWidth + (kColumnCount - 1);
constexpr int kMinCommandWidth = 10;
constexpr int kBarCommandWidth = 16;  // bars only once the command gets this much
constexpr int kMaxCommandWidth = 40;
constexpr int kLabelWidth = 8;  // "Staging "

enum class TierCell { kPercent, kText, kBar };

struct TableLayout {
  int command = kMinCommandWidth;
  int tier = 4;
  TierCell mode = TierCell::kPercent;
};

TableLayout ComputeTableLayout(int width) {
  TableLayout t;
  const int avail = std::max(width - kFixedWidth, kMinCommandWidth + 12);
  if ((avail - kBarCommandWidth) / 3 >= 16) {
    t.mode = TierCell::kBar;  // "[" bar "] " + 9 characters of figures
    t.tier = std::min((avail - kBarCommandWidth) / 3, 32);
  } else if ((avail - kMinCommandWidth) / 3 >= 9) {
    t.mode = TierCell::kText;
    t.tier = std::min((avail - kMinCommandWidth) / 3, 11);
  } else {
    t.mode = TierCell::kPercent;
    t.tier = 4;
  }
  t.command = std::clamp(avail - 3 * t.tier, kMinCommandWidth, kMaxCommandWidth);
  return t;
}

void TierCellSpans(Line* line, const TableLayout& t, uint8_t tier, uint64_t used, uint64_t budget) {
  std::string figures;
  if (budget == 0) {
    figures = used == 0 ? "-" : CompactBytes(used);
  } else if (t.mode == TierCell::kPercent) {
    const uint64_t pct = std::min<uint64_t>(used * 100 / budget, 999);
    figures = std::to_string(pct) + "%";
  } else {
    figures = CompactBytes(used) + "/" + CompactBytes(budget);
  }
  if (t.mode != TierCell::kBar) {
    line->Add(Fit(figures, t.tier, true) + " ");
    return;
  }
  const int bar = t.tier - 12;
  const double fraction = budget == 0 ? 0 : static_cast<double>(used) / static_cast<double>(budget);
  line->Add("[");
  line->Add(BarFill(fraction, bar), TierStyle(tier));
  line->Add("] " + Fit(figures, 9, true) + " ");
}

std::string RateCell(const std::optional<Rates>& rates, double Rates::*field) {
  return Fit(rates ? GBps((*rates).*field) : "-", kRateWidth, true) + " ";
}

uint64_t SortValue(const Process& p, SortKey key) {
  const kvtier_stats_segment& s = *p.seg;
  auto rate = [&](double Rates::*field) -> uint64_t {
    return p.rates ? static_cast<uint64_t>((*p.rates).*field) : 0;
  };
  switch (key) {
    case SortKey::kPid:
      return static_cast<uint64_t>(s.pid);
    case SortKey::kDevice:
      return s.device_used_bytes;
    case SortKey::kHost:
      return s.host_used_bytes;
    case SortKey::kDisk:
      return s.disk_used_bytes;
    case SortKey::kPromote:
      return rate(&Rates::promote_bps);
    case SortKey::kDemote:
      return rate(&Rates::demote_bps);
    case SortKey::kSpill:
      return rate(&Rates::spill_bps);
    case SortKey::kRestore:
      return rate(&Rates::restore_bps);
    case SortKey::kFaults:
      return rate(&Rates::faults_per_s);
    case SortKey::kErrors:
      return stats::ErrorCount(s);
  }
  return 0;
}

}  // namespace

Style TierStyle(uint8_t tier) {
  return static_cast<Style>(static_cast<uint8_t>(Style::kDevice) + std::min<uint8_t>(tier, 3));
}

Line& Line::Add(std::string text, Style style) {
  spans.push_back({std::move(text), style});
  return *this;
}

std::string Line::Text() const {
  std::string out;
  for (const Span& s : spans) out += s.text;
  return out;
}

int Line::Width() const {
  size_t n = 0;
  for (const Span& s : spans) n += s.text.size();
  return static_cast<int>(n);
}

const char* SortKeyName(SortKey key, const TierWords& words) {
  switch (key) {
    case SortKey::kPid:
      return "PID";
    case SortKey::kDevice:
      return words.wide[0];
    case SortKey::kHost:
      return words.wide[1];
    case SortKey::kDisk:
      return words.wide[2];
    case SortKey::kPromote:
      return words.promote_column;
    case SortKey::kDemote:
      return words.demote_column;
    case SortKey::kSpill:
      return "SPILL";
    case SortKey::kRestore:
      return "RESTR";
    case SortKey::kFaults:
      return "FLT/s";
    case SortKey::kErrors:
      return "ERR";
  }
  return "?";
}

SortKey NextSortKey(SortKey key) {
  return key == SortKey::kErrors ? SortKey::kPid : static_cast<SortKey>(static_cast<int>(key) + 1);
}

std::vector<const Process*> SortedProcesses(const Model& model, SortKey key) {
  std::vector<const Process*> out;
  for (const Process& p : model.processes) out.push_back(&p);
  std::stable_sort(out.begin(), out.end(), [key](const Process* a, const Process* b) {
    const uint64_t va = SortValue(*a, key), vb = SortValue(*b, key);
    if (va != vb) return key == SortKey::kPid ? va < vb : va > vb;
    return a->seg->pid < b->seg->pid;
  });
  return out;
}

Line TierMeter(const char* label, uint8_t tier, uint64_t used, uint64_t budget, int width,
               const std::string& suffix) {
  Line line;
  line.Add(Fit(label, kLabelWidth), Style::kLabel);
  const std::string figures = FormatBytesRounded(used) + " / " +
                              (budget == 0 ? std::string("none") : FormatBytesRounded(budget));
  // Past 60 characters a longer bar says nothing more.
  const int bar =
      std::clamp(width - kLabelWidth - 3 - 21 - static_cast<int>(suffix.size()), 10, 60);
  const double fraction = budget == 0 ? 0 : static_cast<double>(used) / static_cast<double>(budget);
  line.Add("[");
  line.Add(BarFill(fraction, bar), TierStyle(tier));
  line.Add("] " + Fit(figures, 21, true) + suffix);
  return line;
}

std::vector<Line> HeaderLines(const Model& model, const ViewOptions& options) {
  std::vector<Line> lines;
  char buf[256];
  Line title;
  std::string timing;
  if (!options.snapshot) {
    snprintf(buf, sizeof buf, "every %.1fs", options.delay_s);
    timing = buf;
  } else if (options.delay_s > 0) {
    snprintf(buf, sizeof buf, "rates over %.1fs", options.delay_s);
    timing = buf;
  } else {
    timing = "no rates (-d 0)";
  }
  // The directory goes last: a narrow screen cuts it first.
  const TierWords& words = ModelWords(model);
  snprintf(buf, sizeof buf, "kvtier-top %s   processes %zu   sort %s   %s   %s",
           ClockTime(model.time_ns).c_str(), model.processes.size(),
           SortKeyName(options.sort, words), timing.c_str(), model.dir.c_str());
  title.Add(buf, Style::kTitle);
  lines.push_back(title);

  // GPU backends' meters where one runs (or none does), the host
  // backend's where one runs: each kind in its own words.
  const Totals& t = model.totals;
  if (t.host_processes < model.processes.size() || model.processes.empty()) {
    const TierWords& gpu_words = GpuTierWords();
    if (t.gpus.size() > 1) {  // a meter per GPU where the processes use several
      for (const auto& [ordinal, gpu] : t.gpus) {
        const std::string label = "GPU " + std::to_string(ordinal);
        lines.push_back(TierMeter(label.c_str(), 0, gpu.used, gpu.budget, options.width));
      }
    } else {
      lines.push_back(TierMeter(gpu_words.meter[0], 0, t.device_used - t.mapped_used,
                                t.device_budget - t.mapped_budget, options.width));
    }
    lines.push_back(TierMeter(gpu_words.meter[1], 1, t.host_used - t.staging_used,
                              t.host_budget - t.staging_budget, options.width));
  }
  if (t.host_processes > 0) {
    const TierWords& host_words = HostTierWords();
    lines.push_back(
        TierMeter(host_words.meter[0], 0, t.mapped_used, t.mapped_budget, options.width));
    lines.push_back(
        TierMeter(host_words.meter[1], 1, t.staging_used, t.staging_budget, options.width));
  }
  lines.push_back(TierMeter(words.meter[2], 2, t.disk_used, t.disk_budget, options.width));

  auto rate = [&](double Rates::*field) {
    return t.has_rates ? GBps(t.rates.*field) : std::string("-");
  };
  Line moves;
  moves.Add(Fit("Moves", kLabelWidth), Style::kLabel);
  moves.Add(std::string(words.promote) + " " + rate(&Rates::promote_bps) + "  " + words.demote +
            " " + rate(&Rates::demote_bps) + "  spill " + rate(&Rates::spill_bps) + "  restore " +
            rate(&Rates::restore_bps) + " GB/s");
  lines.push_back(moves);
  Line faults;
  faults.Add(Fit("Faults", kLabelWidth), Style::kLabel);
  faults.Add(t.has_rates
                 ? Compact(t.rates.faults_per_s) + "/s (" + GBps(t.rates.fault_bps) + " GB/s)"
                 : std::string("-/s"));
  faults.Add("   errors ");
  faults.Add(std::to_string(t.errors), t.errors > 0 ? Style::kError : Style::kNormal);
  lines.push_back(faults);

  if (options.all_problems) {
    for (const Problem& p : model.problems)
      lines.push_back(Line().Add("! " + p.message, Style::kWarn));
    for (const Problem& p : model.removed)
      lines.push_back(Line().Add("- " + p.message, Style::kDim));
  } else if (!model.problems.empty()) {
    std::string text = "! " + model.problems.front().message;
    if (model.problems.size() > 1)
      text += " (+" + std::to_string(model.problems.size() - 1) + " more)";
    lines.push_back(Line().Add(text, Style::kWarn));
  }
  return lines;
}

const TierWords& ProcessWords(const Process& process) {
  return stats::BackendOf(*process.seg) == stats::Backend::kHost ? HostTierWords() : GpuTierWords();
}

const TierWords& ModelWords(const Model& model) {
  const bool host =
      !model.processes.empty() && model.totals.host_processes == model.processes.size();
  return host ? HostTierWords() : GpuTierWords();
}

Line TableHeader(const ViewOptions& options, const TierWords& words) {
  const TableLayout t = ComputeTableLayout(options.width);
  Line line;
  line.fill = Style::kColumnHeader;
  auto column = [&](SortKey key, const char* title, int width, bool right) {
    if (!line.spans.empty()) line.Add(" ", Style::kColumnHeader);
    const bool sorted = key == options.sort;
    line.Add(Fit(title, width, right), sorted ? Style::kSortColumn : Style::kColumnHeader);
  };
  column(SortKey::kPid, "PID", kPidWidth, true);
  line.Add(" " + Fit("COMMAND", t.command) + " " + Fit("BKND", kBackendWidth) + " " +
               Fit("POLICY", kPolicyWidth),
           Style::kColumnHeader);
  for (int k = 0; k < 3; ++k) {
    const char* title =
        static_cast<int>(strlen(words.wide[k])) <= t.tier ? words.wide[k] : words.narrow[k];
    column(static_cast<SortKey>(static_cast<int>(SortKey::kDevice) + k), title, t.tier, true);
  }
  column(SortKey::kPromote, words.promote_column, kRateWidth, true);
  column(SortKey::kDemote, words.demote_column, kRateWidth, true);
  column(SortKey::kSpill, "SPILL", kRateWidth, true);
  column(SortKey::kRestore, "RESTR", kRateWidth, true);
  column(SortKey::kFaults, "FLT/s", kRateWidth, true);
  column(SortKey::kErrors, "ERR", kErrorWidth, true);
  return line;
}

Line ProcessRow(const Process& process, const ViewOptions& options) {
  const TableLayout t = ComputeTableLayout(options.width);
  const kvtier_stats_segment& s = *process.seg;
  Line line;
  line.Add(Fit(std::to_string(s.pid), kPidWidth, true) + " ");
  line.Add(Fit(stats::FieldString(s.command), t.command) + " ");
  line.Add(Fit(stats::FieldString(s.backend), kBackendWidth) + " " +
           Fit(stats::FieldString(s.policy), kPolicyWidth) + " ");
  TierCellSpans(&line, t, 0, s.device_used_bytes, s.device_budget_bytes);
  TierCellSpans(&line, t, 1, s.host_used_bytes, s.host_budget_bytes);
  TierCellSpans(&line, t, 2, s.disk_used_bytes, s.disk_budget_bytes);
  line.Add(
      RateCell(process.rates, &Rates::promote_bps) + RateCell(process.rates, &Rates::demote_bps) +
      RateCell(process.rates, &Rates::spill_bps) + RateCell(process.rates, &Rates::restore_bps));
  line.Add(Fit(process.rates ? Compact(process.rates->faults_per_s) : "-", kRateWidth, true) + " ");
  const uint64_t errors = stats::ErrorCount(s);
  line.Add(Fit(Compact(static_cast<double>(errors)), kErrorWidth, true),
           errors > 0 ? Style::kError : Style::kNormal);
  return line;
}

std::string RenderText(const Model& model, const ViewOptions& options) {
  std::vector<Line> lines = HeaderLines(model, options);
  lines.emplace_back();
  lines.push_back(TableHeader(options, ModelWords(model)));
  const std::vector<const Process*> sorted = SortedProcesses(model, options.sort);
  for (const Process* p : sorted) lines.push_back(ProcessRow(*p, options));
  if (sorted.empty())
    lines.push_back(Line().Add("  no kvtier process publishes statistics in " + model.dir));
  for (const Process* p : sorted) {
    lines.emplace_back();
    for (Line& l : DetailLines(*p, model, options)) lines.push_back(std::move(l));
  }
  std::string out;
  for (const Line& l : lines) {
    std::string text = l.Text();
    text.erase(text.find_last_not_of(' ') + 1);
    out += text;
    out += '\n';
  }
  return out;
}

}  // namespace kvtier::top
