// kvtier-top --json: the Model as one JSON document, for scripts.
//
//   {"dir": "/dev/shm", "time_ns": N, "rate_interval_s": 0.5 | null,
//    "processes": [{"pid", "command", "backend", "policy", "disk_io",
//                   "page_size", "start_time_ns", "update_time_ns",
//                   "start_ticks", "publishes", <every stats field>,
//                   "errors", "rates": {...} | null, "regions_omitted",
//                   "event_count", "region_rows": [...], "events": [...]}],
//    "totals": {...}, "problems": [{"pid", "state", "message"}],
//    "removed": [...]}
// Strings are valid UTF-8 (invalid bytes become U+FFFD) with JSON escapes.
// Thread-safety: stateless.
#pragma once

#include <string>

#include "tools/top/collector.h"

namespace kvtier::top {

// rate_interval_s <= 0 prints null (rates were not sampled).
std::string RenderJson(const Model& model, double rate_interval_s);
// A JSON string literal (with the quotes) for arbitrary bytes.
std::string JsonString(const std::string& bytes);

}  // namespace kvtier::top
