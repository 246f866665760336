// Prometheus text exposition (format 0.0.4) of the kvtier stats segments.
//
// One family per row of stats_fields.def: kvtier_<field>_total for counters,
// kvtier_<field> for gauges, with # HELP from the row's doc and # TYPE; one
// sample per process, labelled pid="..." and command="...". Also:
//   kvtier_processes             processes whose segment was read
//   kvtier_up{pid,command}       1 read, 0 refused or busy (command "")
//   kvtier_info{pid,command,backend,policy,disk_io,layout_version}  1
//   kvtier_start_time_seconds, kvtier_last_publish_time_seconds,
//   kvtier_page_size_bytes       per process
// Thread-safety: stateless.
#pragma once

#include <string>
#include <vector>

#include "tools/stats/stats_reader.h"

namespace kvtier::exporter {

inline constexpr const char* kContentType = "text/plain; version=0.0.4; charset=utf-8";

std::string RenderExposition(const std::vector<stats::ReadResult>& results);
// Label value escaping: backslash, double quote and newline; invalid UTF-8
// becomes U+FFFD.
std::string EscapeLabelValue(const std::string& value);
// # HELP text escaping: backslash and newline.
std::string EscapeHelp(const std::string& text);

}  // namespace kvtier::exporter
