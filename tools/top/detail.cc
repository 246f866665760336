// The detail view of one process (see layout.h): identity, tier meters,
// moves and faults, errors, regions with their heat strips, recent events,
// and every raw field (so new rows of stats_fields.def show up unasked).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "tools/stats/stats_fields.h"
#include "tools/top/format.h"
#include "tools/top/layout.h"

namespace kvtier::top {
namespace {

constexpr int kLabel = 10;  // "Promoted  "
// Region table columns: ID, SIZE, four page counts, the strip, the tag.
constexpr int kIdWidth = 4;
constexpr int kSizeWidth = 6;
constexpr int kCountWidth = 5;
constexpr int kStripStart = kIdWidth + 1 + kSizeWidth + 4 * (1 + kCountWidth) + 1;

std::string Nanos(double ns) {
  char buf[32];
  if (ns < 1e3) {
    snprintf(buf, sizeof buf, "%.0f ns", ns);
  } else if (ns < 1e6) {
    snprintf(buf, sizeof buf, "%.0f us", ns / 1e3);
  } else if (ns < 1e9) {
    snprintf(buf, sizeof buf, "%.1f ms", ns / 1e6);
  } else {
    snprintf(buf, sizeof buf, "%.2f s", ns / 1e9);
  }
  return buf;
}

double Average(uint64_t total, uint64_t count) {
  return count == 0 ? 0.0 : static_cast<double>(total) / static_cast<double>(count);
}

Line Labeled(const char* label) {
  Line line;
  line.Add(Fit(label, kLabel), Style::kLabel);
  return line;
}

Line MoveLine(const char* label, uint64_t bytes, uint64_t pages, const std::optional<Rates>& rates,
              double Rates::*field) {
  Line line = Labeled(label);
  line.Add(Fit(FormatBytesRounded(bytes), 10, true) + " in " + Fit(std::to_string(pages), 9, true) +
           " pages   ");
  line.Add(Fit(rates ? GBps((*rates).*field) : "-", 5, true) + " GB/s");
  return line;
}

void AddCount(Line* line, const char* name, uint64_t value, bool bad_if_nonzero) {
  line->Add(std::string(name) + " ");
  line->Add(std::to_string(value), bad_if_nonzero && value > 0 ? Style::kError : Style::kNormal);
  line->Add("   ");
}

void RegionLines(const kvtier_stats_segment& s, const TierWords& words, const ViewOptions& o,
                 std::vector<Line>* lines) {
  Line title = Labeled("Regions");
  title.Add(std::to_string(s.region_row_count) + " listed");
  if (s.regions_omitted > 0)
    title.Add(", " + std::to_string(s.regions_omitted) + " more not listed");
  title.Add("   heat '" + std::string(kHeatChars) + "' cold to hot");
  lines->push_back(title);
  Line legend = Labeled("");
  if (o.tier_letters) {
    std::string text = "tier under each strip:";
    for (uint8_t t = 0; t < 4; ++t) {
      text += std::string("  ") + words.letter[t] + " " + words.name[t];
    }
    legend.Add(text);
  } else {
    legend.Add("colour = tier: ");
    for (uint8_t t = 0; t < 4; ++t) legend.Add(std::string(words.name[t]) + " ", TierStyle(t));
  }
  lines->push_back(legend);
  if (s.region_row_count == 0) return;

  const int tag_width = std::max(3, o.width - kStripStart - (KVTIER_STATS_HEAT_BUCKETS + 2) - 1);
  Line header;
  header.fill = Style::kColumnHeader;
  header.Add(Fit("ID", kIdWidth, true) + " " + Fit("SIZE", kSizeWidth, true) + " " +
                 Fit(words.narrow[0], kCountWidth, true) + " " +
                 Fit(words.narrow[1], kCountWidth, true) + " " +
                 Fit(words.narrow[2], kCountWidth, true) + " " + Fit("UNTCH", kCountWidth, true) +
                 " " + Fit("HEAT MAP", KVTIER_STATS_HEAT_BUCKETS + 2) + " " + Fit("TAG", tag_width),
             Style::kColumnHeader);
  lines->push_back(header);
  const uint32_t rows = std::min<uint32_t>(s.region_row_count, KVTIER_STATS_MAX_REGIONS);
  for (uint32_t i = 0; i < rows; ++i) {
    const kvtier_stats_region& r = s.region_rows[i];
    Line line;
    line.Add(Fit(std::to_string(r.id), kIdWidth, true) + " " +
             Fit(CompactBytes(r.size), kSizeWidth, true) + " ");
    const uint32_t counts[4] = {r.pages_device, r.pages_host, r.pages_disk, r.pages_untouched};
    for (uint8_t t = 0; t < 4; ++t) {
      line.Add(Fit(Compact(counts[t]), kCountWidth, true),
               counts[t] > 0 ? TierStyle(t) : Style::kDim);
      line.Add(" ");
    }
    line.Add("[");
    // One span per run of equal tier, so the view colours each by tier.
    for (int b = 0; b < KVTIER_STATS_HEAT_BUCKETS;) {
      int e = b;
      std::string run;
      while (e < KVTIER_STATS_HEAT_BUCKETS && r.tier[e] == r.tier[b]) run += HeatChar(r.heat[e++]);
      line.Add(run, TierStyle(r.tier[b]));
      b = e;
    }
    line.Add("] " + stats::FieldString(r.tag));
    lines->push_back(line);
    if (o.tier_letters) {
      std::string letters;
      for (int b = 0; b < KVTIER_STATS_HEAT_BUCKETS; ++b) {
        letters += words.letter[std::min<uint8_t>(r.tier[b], 3)];
      }
      lines->push_back(
          Line().Add(std::string(kStripStart, ' ') + "[" + letters + "]", Style::kDim));
    }
  }
}

// A field's name in the host backend's words ("device_used_bytes" is
// "mapped_used_bytes"); false for a field the host backend never sets
// (the CUDA backend's gate, plain device memory, per-GPU figures).
bool HostFieldName(std::string* name) {
  static constexpr const char* kNever[] = {"plain_device_bytes", "gate_stalls", "gate_stall_ns",
                                           "idle_seals"};
  for (const char* never : kNever) {
    if (*name == never) return false;
  }
  static constexpr struct {
    const char* from;
    const char* to;
  } kWords[] = {{"driver_evictions", "unmapped_at_faults"},
                {"device_", "mapped_"},
                {"host_", "staging_"},
                {"promoted_", "remapped_"},
                {"demoted_", "unmapped_"}};
  for (const auto& w : kWords) {
    const size_t at = name->find(w.from);
    if (at != std::string::npos) name->replace(at, strlen(w.from), w.to);
  }
  return true;
}

}  // namespace

std::vector<Line> DetailLines(const Process& process, const Model& model, const ViewOptions& o) {
  const kvtier_stats_segment& s = *process.seg;
  std::vector<Line> lines;
  char buf[256];

  Line id = Labeled("Process");
  id.Add(std::to_string(s.pid) + " ");
  id.Add(stats::FieldString(s.command), Style::kTitle);
  lines.push_back(id);
  Line config = Labeled("Config");
  config.Add("backend " + stats::FieldString(s.backend) + "  policy " +
             stats::FieldString(s.policy) + "  disk io " + stats::FieldString(s.disk_io) +
             "  page " + FormatBytesRounded(s.page_size));
  lines.push_back(config);
  Line times = Labeled("Started");
  const uint64_t up = s.update_time_ns > s.start_time_ns ? s.update_time_ns - s.start_time_ns : 0;
  const double age =
      model.time_ns > s.update_time_ns ? (model.time_ns - s.update_time_ns) / 1e9 : 0.0;
  snprintf(buf, sizeof buf, "%s, up %s   last publish %.1fs ago (#%llu)",
           ClockTime(s.start_time_ns).c_str(), Duration(up).c_str(), age,
           static_cast<unsigned long long>(s.seq / 2));
  times.Add(buf);
  lines.push_back(times);

  // The host backend's tiers are the engine's blocks mapped in memory
  // (resident), pages staged on their way to SSD, and the SSD: said in
  // those words.
  const bool host = stats::BackendOf(s) == stats::Backend::kHost;
  const TierWords& words = ProcessWords(process);
  // The same suffix width on the three meters keeps their bars aligned.
  const std::string peak = "  peak " + FormatBytesRounded(s.device_peak_bytes);
  const int suffix = static_cast<int>(peak.size());
  lines.push_back(
      TierMeter(words.meter[0], 0, s.device_used_bytes, s.device_budget_bytes, o.width, peak));
  if (s.gpu_count > 1) {  // the process tiers on several GPUs: each one's share
    for (uint32_t i = 0; i < s.gpu_count && i < KVTIER_STATS_MAX_GPUS; ++i) {
      const std::string label = " GPU " + std::to_string(s.gpus[i].ordinal);
      lines.push_back(TierMeter(label.c_str(), 0, s.gpus[i].used_bytes, s.gpus[i].budget_bytes,
                                o.width, Fit("", suffix)));
    }
  }
  lines.push_back(TierMeter(words.meter[1], 1, s.host_used_bytes, s.host_budget_bytes, o.width,
                            Fit("", suffix)));
  lines.push_back(TierMeter(words.meter[2], 2, s.disk_used_bytes, s.disk_budget_bytes, o.width,
                            Fit(s.disk_degraded ? "  DEGRADED" : "", suffix)));
  if (s.disk_degraded) lines.back().spans.back().style = Style::kError;

  const std::optional<Rates>& r = process.rates;
  lines.push_back(MoveLine(host ? "Remapped" : "Promoted", s.promoted_bytes, s.promoted_pages, r,
                           &Rates::promote_bps));
  lines.push_back(MoveLine(host ? "Unmapped" : "Demoted", s.demoted_bytes, s.demoted_pages, r,
                           &Rates::demote_bps));
  lines.push_back(MoveLine("Spilled", s.spilled_bytes, s.spilled_pages, r, &Rates::spill_bps));
  lines.push_back(MoveLine("Restored", s.restored_bytes, s.restored_pages, r, &Rates::restore_bps));

  Line faults = Labeled("Faults");
  faults.Add(std::to_string(s.faults) + " (" + FormatBytesRounded(s.fault_bytes) + ", avg wait " +
             Nanos(Average(s.fault_ns, s.faults)) + ")   " + (r ? Compact(r->faults_per_s) : "-") +
             "/s");
  lines.push_back(faults);
  Line refaults = Labeled("");
  AddCount(&refaults, "refaults", s.refaults, false);
  AddCount(&refaults, host ? "unmapped at faults" : "driver evictions", s.driver_evictions, false);
  lines.push_back(refaults);
  if (s.gate_stalls + s.idle_seals > 0) {  // the CUDA disk tier's gate
    Line gate = Labeled("SSD gate");
    gate.Add(std::to_string(s.idle_seals) + " idle seals   " + std::to_string(s.gate_stalls) +
             " GPU submissions waited for spilled pages (avg " +
             Nanos(Average(s.gate_stall_ns, s.gate_stalls)) + ")");
    lines.push_back(gate);
  }

  Line errors = Labeled("Errors");
  AddCount(&errors, "spill", s.spill_errors, true);
  AddCount(&errors, "restore", s.restore_errors, true);
  AddCount(&errors, "checksum", s.checksum_mismatches, true);
  AddCount(&errors, "bad frees", s.bad_frees, true);
  lines.push_back(errors);

  Line memory = Labeled("Memory");
  if (host) {
    memory.Add(std::to_string(s.regions) + " tiered blocks, " + FormatBytesRounded(s.region_bytes) +
               "   resident peak " + FormatBytesRounded(s.resident_peak_bytes) + "   SSD copies " +
               FormatBytesRounded(s.disk_copy_bytes) + "   own buffers " +
               FormatBytesRounded(s.buffer_bytes));
  } else {
    memory.Add(std::to_string(s.regions) + " regions, " + FormatBytesRounded(s.region_bytes) +
               "   plain device " + FormatBytesRounded(s.plain_device_bytes) + "   own buffers " +
               FormatBytesRounded(s.buffer_bytes));
  }
  lines.push_back(memory);
  if (s.wall_source != 0) {
    // An automatic budget (KVTIER_HOST_BUDGET unset) and the wall it follows.
    static constexpr const char* kWallWords[] = {"", "machine's available memory",
                                                 "memory cgroup v1", "memory cgroup v2"};
    const uint64_t budget =
        host ? s.device_budget_bytes + s.host_budget_bytes : s.host_budget_bytes;
    Line wall = Labeled("Wall");
    wall.Add(std::string(kWallWords[std::min<uint64_t>(s.wall_source, 3)]) + " " +
             FormatBytesRounded(s.wall_bytes) + ", " + FormatBytesRounded(s.wall_used_bytes) +
             " charged   automatic budget " + FormatBytesRounded(budget) + ", cut " +
             std::to_string(s.budget_cuts) + " times");
    lines.push_back(wall);
  }
  Line allocs = Labeled("Allocs");
  allocs.Add(std::to_string(s.allocations) + " seen, " + std::to_string(s.matched_allocations) +
             " tiered, " + std::to_string(s.frees) + " frees");
  lines.push_back(allocs);
  Line policy = Labeled("Policy");
  policy.Add(std::to_string(s.policy_ticks) + " ticks, avg " +
             Nanos(Average(s.policy_ns, s.policy_ticks)) + "   signals " +
             std::to_string(s.signals) + ", ");
  policy.Add(std::to_string(s.signals_dropped) + " dropped",
             s.signals_dropped > 0 ? Style::kWarn : Style::kNormal);
  lines.push_back(policy);

  lines.emplace_back();
  RegionLines(s, words, o, &lines);

  lines.emplace_back();
  Line events = Labeled("Events");
  events.Add(s.event_count == 0 ? "none" : "newest first");
  lines.push_back(events);
  const uint64_t first =
      s.event_count > KVTIER_STATS_MAX_EVENTS ? s.event_count - KVTIER_STATS_MAX_EVENTS : 0;
  for (uint64_t i = s.event_count; i-- > first;) {
    const kvtier_stats_event& e = s.events[i % KVTIER_STATS_MAX_EVENTS];
    lines.push_back(Line().Add("  " + ClockTime(e.time_ns) + "  " + stats::FieldString(e.text)));
  }

  lines.emplace_back();
  lines.push_back(Labeled("Fields"));
  Line fields;
  fields.Add("  ");
  for (const stats::FieldInfo& f : stats::Fields()) {
    std::string name = f.name;
    if (host && !HostFieldName(&name)) continue;
    const std::string item = name + "=" + std::to_string(f.get(s));
    if (fields.Width() > 2 && fields.Width() + 2 + static_cast<int>(item.size()) > o.width) {
      lines.push_back(fields);
      fields = Line();
      fields.Add("  ");
    } else if (fields.Width() > 2) {
      fields.Add("  ");
    }
    fields.Add(item, Style::kDim);
  }
  lines.push_back(fields);
  return lines;
}

}  // namespace kvtier::top
