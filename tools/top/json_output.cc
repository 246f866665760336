// kvtier-top --json (see json_output.h).
#include "tools/top/json_output.h"

#include <cmath>
#include <cstdio>

#include "tools/stats/stats_fields.h"

namespace kvtier::top {
namespace {

std::string Number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  snprintf(buf, sizeof buf, "%.3f", v);
  return buf;
}

class Writer {
 public:
  std::string& out() { return out_; }
  void Key(const char* key) {
    Comma();
    out_ += JsonString(key);
    out_ += ':';
    fresh_ = true;
  }
  void Value(const std::string& raw) {
    Comma();
    out_ += raw;
  }
  void Uint(const char* key, uint64_t v) {
    Key(key);
    Value(std::to_string(v));
  }
  void Num(const char* key, double v) {
    Key(key);
    Value(Number(v));
  }
  void Str(const char* key, const std::string& v) {
    Key(key);
    Value(JsonString(v));
  }
  void Open(char c) {
    Comma();
    out_ += c;
    fresh_ = true;
  }
  void Close(char c) {
    out_ += c;
    fresh_ = false;
  }

 private:
  void Comma() {
    if (!fresh_) out_ += ',';
    fresh_ = false;
  }
  std::string out_;
  bool fresh_ = true;
};

void RatesJson(Writer* w, const Rates& r) {
  w->Open('{');
  w->Num("interval_s", r.interval_s);
  w->Num("promote_bytes_per_s", r.promote_bps);
  w->Num("demote_bytes_per_s", r.demote_bps);
  w->Num("spill_bytes_per_s", r.spill_bps);
  w->Num("restore_bytes_per_s", r.restore_bps);
  w->Num("fault_bytes_per_s", r.fault_bps);
  w->Num("faults_per_s", r.faults_per_s);
  w->Close('}');
}

void ProcessJson(Writer* w, const Process& p) {
  const kvtier_stats_segment& s = *p.seg;
  w->Open('{');
  w->Uint("pid", static_cast<uint64_t>(s.pid));
  w->Str("command", stats::FieldString(s.command));
  w->Str("backend", stats::FieldString(s.backend));
  w->Str("policy", stats::FieldString(s.policy));
  w->Str("disk_io", stats::FieldString(s.disk_io));
  w->Uint("page_size", s.page_size);
  w->Uint("start_time_ns", s.start_time_ns);
  w->Uint("update_time_ns", s.update_time_ns);
  w->Uint("start_ticks", s.start_ticks);
  w->Uint("publishes", s.seq / 2);
  for (const stats::FieldInfo& f : stats::Fields()) w->Uint(f.name, f.get(s));
  w->Uint("errors", stats::ErrorCount(s));
  w->Key("rates");
  if (p.rates) {
    RatesJson(w, *p.rates);
  } else {
    w->Value("null");
  }
  w->Key("gpus");
  w->Open('[');
  for (uint32_t i = 0; i < s.gpu_count && i < KVTIER_STATS_MAX_GPUS; ++i) {
    w->Open('{');
    w->Uint("ordinal", static_cast<uint64_t>(s.gpus[i].ordinal));
    w->Uint("used_bytes", s.gpus[i].used_bytes);
    w->Uint("budget_bytes", s.gpus[i].budget_bytes);
    w->Close('}');
  }
  w->Close(']');
  w->Uint("regions_omitted", s.regions_omitted);
  w->Uint("event_count", s.event_count);
  w->Key("region_rows");  // "regions" is the stats field (regions alive)
  w->Open('[');
  for (uint32_t i = 0; i < s.region_row_count && i < KVTIER_STATS_MAX_REGIONS; ++i) {
    const kvtier_stats_region& r = s.region_rows[i];
    w->Open('{');
    w->Uint("id", r.id);
    w->Uint("base", r.base);
    w->Uint("size", r.size);
    w->Uint("page_size", r.page_size);
    w->Uint("pages_device", r.pages_device);
    w->Uint("pages_host", r.pages_host);
    w->Uint("pages_disk", r.pages_disk);
    w->Uint("pages_untouched", r.pages_untouched);
    w->Str("tag", stats::FieldString(r.tag));
    for (const char* key : {"heat", "tier"}) {
      const uint8_t* v = key[0] == 'h' ? r.heat : r.tier;
      w->Key(key);
      w->Open('[');
      for (int b = 0; b < KVTIER_STATS_HEAT_BUCKETS; ++b) w->Value(std::to_string(v[b]));
      w->Close(']');
    }
    w->Close('}');
  }
  w->Close(']');
  w->Key("events");  // oldest first
  w->Open('[');
  const uint64_t first =
      s.event_count > KVTIER_STATS_MAX_EVENTS ? s.event_count - KVTIER_STATS_MAX_EVENTS : 0;
  for (uint64_t i = first; i < s.event_count; ++i) {
    const kvtier_stats_event& e = s.events[i % KVTIER_STATS_MAX_EVENTS];
    w->Open('{');
    w->Uint("time_ns", e.time_ns);
    w->Str("text", stats::FieldString(e.text));
    w->Close('}');
  }
  w->Close(']');
  w->Close('}');
}

void ProblemsJson(Writer* w, const char* key, const std::vector<Problem>& problems) {
  w->Key(key);
  w->Open('[');
  for (const Problem& p : problems) {
    w->Open('{');
    w->Uint("pid", static_cast<uint64_t>(p.pid));
    w->Str("state", stats::ReadStateName(p.state));
    w->Str("message", p.message);
    w->Close('}');
  }
  w->Close(']');
}

}  // namespace

std::string JsonString(const std::string& bytes) {
  const std::string text = stats::ValidUtf8(bytes);
  std::string out = "\"";
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7F) {
      char buf[8];
      snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += ch;  // including the bytes of multi-byte characters
    }
  }
  out += '"';
  return out;
}

std::string RenderJson(const Model& model, double rate_interval_s) {
  Writer w;
  w.Open('{');
  w.Str("dir", model.dir);
  w.Uint("time_ns", model.time_ns);
  w.Key("rate_interval_s");
  w.Value(rate_interval_s > 0 ? Number(rate_interval_s) : "null");
  w.Key("processes");
  w.Open('[');
  for (const Process& p : model.processes) ProcessJson(&w, p);
  w.Close(']');
  const Totals& t = model.totals;
  w.Key("totals");
  w.Open('{');
  w.Uint("processes", model.processes.size());
  w.Uint("device_used_bytes", t.device_used);
  w.Uint("device_budget_bytes", t.device_budget);
  w.Key("gpus");
  w.Open('[');
  for (const auto& [ordinal, gpu] : t.gpus) {
    w.Open('{');
    w.Uint("ordinal", static_cast<uint64_t>(ordinal));
    w.Uint("used_bytes", gpu.used);
    w.Uint("budget_bytes", gpu.budget);
    w.Close('}');
  }
  w.Close(']');
  w.Uint("host_used_bytes", t.host_used);
  w.Uint("host_budget_bytes", t.host_budget);
  w.Uint("disk_used_bytes", t.disk_used);
  w.Uint("disk_budget_bytes", t.disk_budget);
  w.Uint("errors", t.errors);
  w.Key("rates");
  if (t.has_rates) {
    RatesJson(&w, t.rates);
  } else {
    w.Value("null");
  }
  w.Close('}');
  ProblemsJson(&w, "problems", model.problems);
  ProblemsJson(&w, "removed", model.removed);
  w.Close('}');
  w.out() += '\n';
  return w.out();
}

}  // namespace kvtier::top
