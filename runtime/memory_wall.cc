#include "runtime/memory_wall.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "runtime/storage/env.h"
#include "runtime/units.h"

namespace kvtier {
namespace {

constexpr size_t kMaxFileBytes = 64 << 10;  // memory.stat and mountinfo fit well within
// cgroup v1 writes "unlimited" as PAGE_COUNTER_MAX pages (9223372036854771712
// with 4 KiB pages); no real limit comes near 2^62.
constexpr uint64_t kV1Unlimited = uint64_t{1} << 62;
constexpr uint64_t kMinHeadroom = 4 << 20;
constexpr uint64_t kHeadroomShare = 32;  // of the wall
constexpr uint64_t kGrowShare = 16;      // the budget grows only by more than this share
constexpr uint64_t kCutShare = 8;        // cut once more when the cgroup met its wall
// ... and grow again only after this many looks (3 s): the wall said the
// room was less than it looked.
constexpr uint32_t kHoldLooks = 30;

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\n'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n'))
    s.remove_suffix(1);
  return s;
}

bool ParseUint(std::string_view s, uint64_t* out) {
  s = Trim(s);
  if (s.empty() || s.size() > 20) return false;
  uint64_t v = 0;
  for (char ch : s) {
    if (ch < '0' || ch > '9') return false;
    const uint64_t d = static_cast<uint64_t>(ch - '0');
    if (v > (kNoLimit - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = v;
  return true;
}

std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == sep) {
      if (i > start) out.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  return out;
}

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string Unescape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    auto oct = [&](size_t j) { return s[j] >= '0' && s[j] <= '7'; };
    if (s[i] == '\\' && i + 3 < s.size() && oct(i + 1) && oct(i + 2) && oct(i + 3)) {
      out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

// The cgroup's directory: the mount point, and the path below the mount's
// root. "" when the path lies outside what is mounted.
std::string CgroupDir(const std::string& point, const std::string& root, const std::string& path) {
  if (point.empty() || path.empty() || path[0] != '/') return "";
  if (root == "/" || root.empty()) return path == "/" ? point : point + path;
  if (path == root) return point;
  if (path.compare(0, root.size(), root) == 0 && path.size() > root.size() &&
      path[root.size()] == '/') {
    return point + path.substr(root.size());
  }
  return "";
}

struct Reader {
  Env& env;
  const std::string& root;
  std::string problem;

  // The file's text; false if it is not there (not a problem: a level of
  // the hierarchy without that file sets no limit) or cannot be read (a
  // problem).
  bool Read(const std::string& path, std::string* text) {
    Result<std::string> r = env.ReadFile(root + path, kMaxFileBytes);
    if (r.ok()) {
      *text = std::move(r).value();
      return true;
    }
    if (r.status().message().find("No such file") == std::string::npos) Note(r.status().message());
    return false;
  }
  void Note(const std::string& what) {
    if (problem.empty()) problem = what;
  }
  // A limit file; kNoLimit when absent, unlimited or garbage (said).
  uint64_t Limit(const std::string& path) {
    std::string text;
    if (!Read(path, &text)) return kNoLimit;
    uint64_t v = 0;
    if (!ParseLimit(text, &v)) {
      Note(path + ": '" + std::string(Trim(text).substr(0, 32)) + "' is not a byte count");
      return kNoLimit;
    }
    return v;
  }
  // A count file (usage); false when absent or garbage (said).
  bool Count(const std::string& path, uint64_t* out) {
    std::string text;
    if (!Read(path, &text)) return false;
    if (!ParseUint(text, out)) {
      Note(path + ": '" + std::string(Trim(text).substr(0, 32)) + "' is not a number");
      return false;
    }
    return true;
  }
};

// One level of the hierarchy: its limit and its working set.
struct Level {
  uint64_t limit = kNoLimit;
  uint64_t used = 0;
  uint64_t swap = kNoLimit;
  uint64_t inactive_anon = 0;
  uint64_t swap_room = kNoLimit;  // what the level lets its memory still swap (kNoLimit: no limit)
  std::string where;
};

// A hierarchical memory.stat key of v1 (total_KEY), or the level's own.
void V1StatValue(const std::string& stat, const char* key, uint64_t* out) {
  if (!StatValue(stat, std::string("total_") + key, out)) StatValue(stat, key, out);
}

// A setting file that reads 0 (a swappiness): false when absent or garbage.
bool IsZero(Reader& rd, const std::string& path) {
  std::string text;
  uint64_t v = 1;
  return rd.Read(path, &text) && ParseUint(text, &v) && v == 0;
}

Level ReadV1Level(Reader& rd, const std::string& dir) {
  Level l;
  // Swap first: every level's swap limit holds below it, limited in memory
  // or not. Memory + swap less the memory limit, less what is in swap
  // (memsw usage less usage); none at swappiness 0, where anonymous memory
  // is not swapped out at the cgroup's limit.
  const uint64_t limit = rd.Limit(dir + "/memory.limit_in_bytes");
  const uint64_t memsw = rd.Limit(dir + "/memory.memsw.limit_in_bytes");
  uint64_t usage = 0;
  const bool have_usage = limit != kNoLimit && rd.Count(dir + "/memory.usage_in_bytes", &usage);
  if (IsZero(rd, dir + "/memory.swappiness")) {
    l.swap_room = 0;
  } else if (memsw != kNoLimit) {
    uint64_t memsw_usage = 0;
    const bool have_memsw = rd.Count(dir + "/memory.memsw.usage_in_bytes", &memsw_usage);
    if (limit == kNoLimit) {
      // Memory and swap together are limited, memory alone is not.
      l.swap_room = !have_memsw ? memsw : (memsw > memsw_usage ? memsw - memsw_usage : 0);
    } else {
      const uint64_t swap = memsw > limit ? memsw - limit : 0;
      const uint64_t swapped =
          have_memsw && have_usage && memsw_usage > usage ? memsw_usage - usage : 0;
      l.swap_room = swap > swapped ? swap - swapped : 0;
    }
  }
  if (!have_usage) return l;  // no memory limit here (or no usage to weigh it by)
  std::string stat;
  uint64_t inactive = 0;
  if (rd.Read(dir + "/memory.stat", &stat)) {
    V1StatValue(stat, "inactive_file", &inactive);
    V1StatValue(stat, "inactive_anon", &l.inactive_anon);
  }
  l.limit = limit;
  l.used = usage - std::min(usage, inactive);
  l.where = dir + "/memory.limit_in_bytes";
  if (memsw != kNoLimit) l.swap = memsw > limit ? memsw - limit : 0;
  return l;
}

Level ReadV2Level(Reader& rd, const std::string& dir) {
  Level l;
  // Swap first, as in v1: memory.swap.max less memory.swap.current.
  l.swap = rd.Limit(dir + "/memory.swap.max");
  if (l.swap != kNoLimit) {
    uint64_t swapped = 0;
    if (!rd.Count(dir + "/memory.swap.current", &swapped)) swapped = 0;
    l.swap_room = l.swap > swapped ? l.swap - swapped : 0;
  }
  const uint64_t max = rd.Limit(dir + "/memory.max");
  const uint64_t high = rd.Limit(dir + "/memory.high");
  const uint64_t limit = std::min(max, high);
  if (limit == kNoLimit) return l;
  uint64_t current = 0;
  if (!rd.Count(dir + "/memory.current", &current)) return l;
  std::string stat;
  uint64_t inactive = 0;
  if (rd.Read(dir + "/memory.stat", &stat)) {
    StatValue(stat, "inactive_file", &inactive);
    StatValue(stat, "inactive_anon", &l.inactive_anon);
  }
  l.limit = limit;
  l.used = current - std::min(current, inactive);
  l.where = dir + (high < max ? "/memory.high" : "/memory.max");
  return l;
}

}  // namespace

const char* WallSourceName(WallReading::Source source) {
  switch (source) {
    case WallReading::Source::kNone:
      return "none";
    case WallReading::Source::kMemAvailable:
      return "the machine's available memory";
    case WallReading::Source::kCgroupV1:
      return "memory cgroup v1";
    case WallReading::Source::kCgroupV2:
      return "memory cgroup v2";
  }
  return "?";
}

bool ParseLimit(std::string_view text, uint64_t* out) {
  text = Trim(text);
  if (text == "max") {
    *out = kNoLimit;
    return true;
  }
  uint64_t v = 0;
  if (!ParseUint(text, &v)) return false;
  *out = v >= kV1Unlimited ? kNoLimit : v;
  return true;
}

bool StatValue(std::string_view text, std::string_view key, uint64_t* out, bool unit_kib) {
  for (std::string_view line : Split(text, '\n')) {
    if (line.size() <= key.size() || line.compare(0, key.size(), key) != 0) continue;
    std::string_view rest = line.substr(key.size());
    if (unit_kib) {
      if (rest.front() != ':') continue;
      rest.remove_prefix(1);
      rest = Trim(rest);
      if (rest.size() > 3 && rest.substr(rest.size() - 3) == " kB") rest.remove_suffix(3);
    } else if (rest.front() != ' ') {
      continue;
    }
    uint64_t v = 0;
    if (!ParseUint(rest, &v)) return false;
    if (unit_kib && v > kNoLimit / 1024) return false;
    *out = unit_kib ? v * 1024 : v;
    return true;
  }
  return false;
}

CgroupPaths ParseProcCgroup(std::string_view text) {
  CgroupPaths out;
  for (std::string_view line : Split(text, '\n')) {
    const size_t a = line.find(':');
    if (a == std::string_view::npos) continue;
    const size_t b = line.find(':', a + 1);
    if (b == std::string_view::npos) continue;
    const std::string_view id = line.substr(0, a);
    const std::string_view controllers = line.substr(a + 1, b - a - 1);
    const std::string path(line.substr(b + 1));
    if (id == "0" && controllers.empty()) {
      out.v2 = path;
      continue;
    }
    for (std::string_view c : Split(controllers, ',')) {
      if (c == "memory") out.v1_memory = path;
    }
  }
  return out;
}

CgroupMounts ParseMountinfo(std::string_view text) {
  CgroupMounts out;
  for (std::string_view line : Split(text, '\n')) {
    const std::vector<std::string_view> f = Split(line, ' ');
    size_t dash = 0;
    while (dash < f.size() && f[dash] != "-") ++dash;
    if (dash < 5 || dash + 4 > f.size()) continue;  // fstype, source, options after it
    const std::string_view fstype = f[dash + 1];
    if (fstype == "cgroup2" && out.v2_point.empty()) {
      out.v2_point = Unescape(f[4]);
      out.v2_root = Unescape(f[3]);
    } else if (fstype == "cgroup" && out.v1_point.empty()) {
      for (std::string_view opt : Split(f[dash + 3], ',')) {
        if (opt != "memory") continue;
        out.v1_point = Unescape(f[4]);
        out.v1_root = Unescape(f[3]);
      }
    }
  }
  return out;
}

WallReading ReadMemoryWall(Env& env, const std::string& root) {
  Reader rd{env, root, {}};
  WallReading best;
  auto consider = [&](const Level& l, WallReading::Source source) {
    if (l.limit == kNoLimit) return;
    const uint64_t room = l.limit > l.used ? l.limit - l.used : 0;
    if (best.source != WallReading::Source::kNone && room >= best.room()) return;
    best.source = source;
    best.limit = l.limit;
    best.used = l.used;
    best.swap_limit = l.swap;
    best.inactive_anon = l.inactive_anon;
    best.where = l.where;
  };

  std::string cgroup_text, mountinfo;
  const bool have_cgroup = rd.Read("/proc/self/cgroup", &cgroup_text);
  const bool have_mounts = have_cgroup && rd.Read("/proc/self/mountinfo", &mountinfo);
  uint64_t events = 0;
  uint64_t swap_room = kNoLimit;  // the least any level on the way up leaves
  if (have_mounts) {
    const CgroupPaths paths = ParseProcCgroup(cgroup_text);
    const CgroupMounts mounts = ParseMountinfo(mountinfo);
    // v1 where the memory controller is mounted as v1 (a hybrid system
    // shows a "0::" line too, with no controllers behind it).
    const bool v1 = !paths.v1_memory.empty() && !mounts.v1_point.empty();
    const std::string point = v1 ? mounts.v1_point : mounts.v2_point;
    const std::string dir = v1 ? CgroupDir(mounts.v1_point, mounts.v1_root, paths.v1_memory)
                               : CgroupDir(mounts.v2_point, mounts.v2_root, paths.v2);
    if (dir.empty() && (v1 || !paths.v2.empty())) {
      rd.Note("the process's memory cgroup (" + (v1 ? paths.v1_memory : paths.v2) +
              ") is not under its mount");
    }
    if (!dir.empty()) {
      const auto source = v1 ? WallReading::Source::kCgroupV1 : WallReading::Source::kCgroupV2;
      for (std::string d = dir;;) {
        const Level level = v1 ? ReadV1Level(rd, d) : ReadV2Level(rd, d);
        consider(level, source);
        swap_room = std::min(swap_room, level.swap_room);
        if (d.size() <= point.size()) break;
        d = d.substr(0, d.rfind('/'));
        if (d.size() < point.size()) break;
      }
      if (!v1 && IsZero(rd, "/proc/sys/vm/swappiness")) {
        swap_room = 0;  // v2 reclaims with the machine's swappiness: file pages only
      }
      std::string text;
      if (!v1 && rd.Read(dir + "/memory.events", &text)) {
        for (const char* key : {"high", "max", "oom"}) {
          uint64_t v = 0;
          if (StatValue(text, key, &v)) events += v;
        }
      }
    }
  }
  std::string meminfo;
  uint64_t total = 0, available = 0, swap_free = 0;
  if (rd.Read("/proc/meminfo", &meminfo) && StatValue(meminfo, "MemTotal", &total, true) &&
      StatValue(meminfo, "MemAvailable", &available, true)) {
    Level machine;
    machine.limit = total;
    machine.used = total > available ? total - available : 0;
    machine.where = "/proc/meminfo";
    consider(machine, WallReading::Source::kMemAvailable);
    if (!StatValue(meminfo, "SwapFree", &swap_free, true)) swap_free = 0;
  } else {
    rd.Note("/proc/meminfo: no MemTotal and MemAvailable");
  }
  // Swap is room only at a cgroup's wall: MemAvailable counts none.
  const bool cgroup = best.source == WallReading::Source::kCgroupV1 ||
                      best.source == WallReading::Source::kCgroupV2;
  best.swap_room = cgroup ? std::min(swap_room, swap_free) : 0;
  best.events = events;
  best.problem = std::move(rd.problem);
  return best;
}

uint64_t StartBudget(Env& env, const std::string& root, uint64_t floor, uint64_t own_reserve,
                     WallReading* wall) {
  WallBudget budget(floor, own_reserve);
  WallBudget::Look look;
  look.wall = ReadMemoryWall(env, root);
  look.own_buffers = AlignedBuffer::live_bytes();
  *wall = look.wall;
  return budget.Next(look);
}

uint64_t CapFixedBudget(uint64_t fixed, Env& env, const std::string& root, uint64_t floor,
                        uint64_t own_reserve, std::string* said) {
  said->clear();
  WallReading wall;
  const uint64_t room = StartBudget(env, root, floor, own_reserve, &wall);
  if (wall.source == WallReading::Source::kNone || fixed <= wall.limit) return fixed;
  char buf[512];
  snprintf(buf, sizeof buf,
           "KVTIER_HOST_BUDGET=%s is above the memory wall (%s, %s at %s): capped to %s, the room "
           "the wall leaves (leave KVTIER_HOST_BUDGET unset to follow the wall)",
           FormatBytes(fixed).c_str(), WallSourceName(wall.source), FormatBytes(wall.limit).c_str(),
           wall.where.c_str(), FormatBytes(room).c_str());
  *said = buf;
  return room;
}

uint64_t WallBudget::Next(const Look& look) {
  const WallReading& w = look.wall;
  if (w.source == WallReading::Source::kNone) {
    // Nothing could be read: hold what there is, or the floor.
    at_floor_ = budget_ <= floor_;
    budget_ = std::max(budget_, floor_);
    return budget_;
  }
  const uint64_t tiered = look.tiered_in_memory;
  // Cold anonymous memory the kernel can swap: inactive anonymous pages
  // beyond the tiered ones (which may all be on that list: shmem), as many
  // as the swap takes. The wall met, the kernel swaps it out and the room
  // is real; kvtier's own pages it leaves to kvtier.
  swappable_ = w.inactive_anon > tiered ? std::min(w.inactive_anon - tiered, w.swap_room) : 0;
  const uint64_t taken_here = tiered + swappable_;
  other_ = w.used > taken_here ? w.used - taken_here : 0;
  const uint64_t unmade = own_reserve_ > look.own_buffers ? own_reserve_ - look.own_buffers : 0;
  headroom_ = std::max(w.limit / kHeadroomShare, kMinHeadroom) + unmade;
  const uint64_t taken = other_ + headroom_;
  uint64_t target = w.limit > taken ? w.limit - taken : 0;
  // The cgroup met its wall (v2 memory.events rose) while the room left is
  // less than the headroom: the other memory pushes. (A full cgroup that
  // reclaims page cache raises "max" events too, with room to spare.)
  const bool met_wall = have_events_ && w.events > events_ && w.room() < headroom_;
  events_ = w.events;
  have_events_ = true;
  if (met_wall && budget_ != 0) {
    target = std::min(target, budget_ - budget_ / kCutShare);
    hold_looks_ = kHoldLooks;
  }
  at_floor_ = target <= floor_;
  target = std::max(target, floor_);
  const bool grow = target > budget_ + budget_ / kGrowShare && hold_looks_ == 0;
  if (hold_looks_ != 0) --hold_looks_;
  if (budget_ == 0 || target < budget_ || grow) budget_ = target;
  return budget_;
}

std::string WallBudget::Why(const WallReading& wall) const {
  char buf[512];
  if (wall.source == WallReading::Source::kNone) {
    snprintf(buf, sizeof buf, "no memory wall could be read; the budget stays %s",
             FormatBytes(budget_).c_str());
    return buf;
  }
  const std::string cold = swappable_ == 0 ? ""
                                           : " (less " + FormatBytes(swappable_) +
                                                 " of cold memory the kernel can swap)";
  snprintf(buf, sizeof buf, "%s wall %s (%s), other memory %s%s, headroom %s: budget %s%s",
           WallSourceName(wall.source), FormatBytes(wall.limit).c_str(), wall.where.c_str(),
           FormatBytes(other_).c_str(), cold.c_str(), FormatBytes(headroom_).c_str(),
           FormatBytes(budget_).c_str(),
           at_floor_ ? " (the least kvtier can work with: the wall leaves no more)" : "");
  return buf;
}

}  // namespace kvtier
