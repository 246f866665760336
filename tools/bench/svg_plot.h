// SVG plots of kvtier-bench multiround, written directly (no dependencies):
// the TTFT CDF of every system on one log-scale axis, and each system's tier
// occupancy over time as small multiples.
// Thread-safety: functions of their arguments.
#pragma once

#include <string>
#include <vector>

#include "runtime/status.h"
#include "tools/bench/systems.h"

namespace kvtier::bench {

Status WriteTtftCdfSvg(const std::string& path, const std::vector<SystemResult>& results,
                       const std::string& title);
Status WriteOccupancySvg(const std::string& path, const std::vector<SystemResult>& results,
                         const std::string& title);

}  // namespace kvtier::bench
