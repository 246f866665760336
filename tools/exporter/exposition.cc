// Prometheus text exposition of the stats segments (see exposition.h).
#include "tools/exporter/exposition.h"

#include <cstdio>

#include "tools/stats/stats_fields.h"

namespace kvtier::exporter {
namespace {

std::string Labels(const kvtier_stats_segment& s) {
  return "{pid=\"" + std::to_string(s.pid) + "\",command=\"" +
         EscapeLabelValue(stats::FieldString(s.command)) + "\"}";
}

void Family(std::string* out, const std::string& name, const char* type, const std::string& help) {
  *out += "# HELP " + name + " " + EscapeHelp(help) + "\n";
  *out += "# TYPE " + name + " " + type + "\n";
}

std::string Seconds(uint64_t ns) {
  char buf[64];
  snprintf(buf, sizeof buf, "%llu.%09llu", static_cast<unsigned long long>(ns / 1000000000u),
           static_cast<unsigned long long>(ns % 1000000000u));
  return buf;
}

}  // namespace

std::string EscapeLabelValue(const std::string& value) {
  std::string out;
  for (const char c : stats::ValidUtf8(value)) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string EscapeHelp(const std::string& text) {
  std::string out;
  for (const char c : stats::ValidUtf8(text)) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string RenderExposition(const std::vector<stats::ReadResult>& results) {
  std::vector<const kvtier_stats_segment*> ok;
  for (const stats::ReadResult& r : results) {
    if (r.state == stats::ReadState::kOk) ok.push_back(r.snapshot.get());
  }
  std::string out;
  Family(&out, "kvtier_processes", "gauge", "kvtier processes whose statistics segment was read");
  out += "kvtier_processes " + std::to_string(ok.size()) + "\n";

  Family(&out, "kvtier_up", "gauge",
         "1 if the process's statistics segment was read; 0 if it was refused (another layout) or "
         "busy");
  for (const stats::ReadResult& r : results) {
    if (r.state == stats::ReadState::kOk) {
      out += "kvtier_up" + Labels(*r.snapshot) + " 1\n";
    } else if (r.state == stats::ReadState::kRefused || r.state == stats::ReadState::kBusy) {
      out += "kvtier_up{pid=\"" + std::to_string(r.pid) + "\",command=\"\"} 0\n";
    }
  }

  Family(&out, "kvtier_info", "gauge",
         "Configuration of a kvtier process, in labels (the value is always 1)");
  for (const kvtier_stats_segment* s : ok) {
    out += "kvtier_info{pid=\"" + std::to_string(s->pid) + "\",command=\"" +
           EscapeLabelValue(stats::FieldString(s->command)) + "\",backend=\"" +
           EscapeLabelValue(stats::FieldString(s->backend)) + "\",policy=\"" +
           EscapeLabelValue(stats::FieldString(s->policy)) + "\",disk_io=\"" +
           EscapeLabelValue(stats::FieldString(s->disk_io)) + "\",layout_version=\"" +
           std::to_string(s->version) + "\"} 1\n";
  }
  Family(&out, "kvtier_start_time_seconds", "gauge",
         "When the process's kvtier runtime started (Unix time)");
  for (const kvtier_stats_segment* s : ok)
    out += "kvtier_start_time_seconds" + Labels(*s) + " " + Seconds(s->start_time_ns) + "\n";
  Family(&out, "kvtier_last_publish_time_seconds", "gauge",
         "When the process last published its statistics (Unix time)");
  for (const kvtier_stats_segment* s : ok) {
    out +=
        "kvtier_last_publish_time_seconds" + Labels(*s) + " " + Seconds(s->update_time_ns) + "\n";
  }
  Family(&out, "kvtier_page_size_bytes", "gauge", "Tiering granularity of the process");
  for (const kvtier_stats_segment* s : ok)
    out += "kvtier_page_size_bytes" + Labels(*s) + " " + std::to_string(s->page_size) + "\n";

  // Per GPU: the CUDA backend keeps a budget on each GPU a process uses.
  const std::pair<const char*, const char*> gpu_families[] = {
      {"kvtier_gpu_used_bytes", "Bytes of tiered pages resident on one GPU"},
      {"kvtier_gpu_budget_bytes", "GPU memory kvtier's regions may occupy on one GPU"}};
  for (const auto& [name, help] : gpu_families) {
    Family(&out, name, "gauge", help);
    const bool used = name == gpu_families[0].first;
    for (const kvtier_stats_segment* s : ok) {
      std::string labels = Labels(*s);
      labels.pop_back();  // the closing brace: the GPU's label follows
      for (uint32_t i = 0; i < s->gpu_count && i < KVTIER_STATS_MAX_GPUS; ++i) {
        const kvtier_stats_gpu& g = s->gpus[i];
        out += std::string(name) + labels + ",gpu=\"" + std::to_string(g.ordinal) + "\"} " +
               std::to_string(used ? g.used_bytes : g.budget_bytes) + "\n";
      }
    }
  }

  for (const stats::FieldInfo& f : stats::Fields()) {
    const bool counter = f.kind == stats::FieldKind::kCounter;
    // Prometheus measures time in seconds: fault_ns becomes fault_seconds_total.
    std::string base = f.name;
    const bool nanoseconds = base.size() > 3 && base.compare(base.size() - 3, 3, "_ns") == 0;
    if (nanoseconds) base.replace(base.size() - 3, 3, "_seconds");
    const std::string name = "kvtier_" + base + (counter ? "_total" : "");
    Family(&out, name, counter ? "counter" : "gauge", f.doc);
    for (const kvtier_stats_segment* s : ok) {
      const uint64_t v = f.get(*s);
      out += name + Labels(*s) + " " + (nanoseconds ? Seconds(v) : std::to_string(v)) + "\n";
    }
  }
  return out;
}

}  // namespace kvtier::exporter
