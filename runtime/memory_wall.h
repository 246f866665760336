// The memory wall: the tightest memory limit the process lives under (its
// memory cgroup's, v1 or v2, anywhere up the hierarchy, or the machine's
// available memory), what is charged against it now, and the automatic
// budget that follows it (KVTIER_HOST_BUDGET unset).
//
// A container's memory cgroup is the real wall of an engine: a budget sized
// from the machine's memory gets it OOM-killed. Every file is read through
// Env::ReadFile under a root ("" on a live system; a fake tree in tests), so
// that tests can give any hierarchy.
//
// Thread-safety: ReadMemoryWall is a pure function of the files; a
// WallBudget belongs to one thread (the policy thread's tick).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kvtier {

class Env;

constexpr uint64_t kNoLimit = ~uint64_t{0};

// How often the policy thread looks at the wall (a few small files).
constexpr uint64_t kWallLookNs = 100'000'000;
// The least automatic budget: 16 pages (a few mapped, two staged), but no
// more than 64 MiB of them, and 3 pages at least (the host backend's least).
constexpr uint64_t WallFloor(uint64_t page) {
  const uint64_t most = uint64_t{64} << 20;
  return 16 * page < most ? 16 * page : (3 * page > most ? 3 * page : most);
}
// kvtier's own memory that a disk tier maps after start (the restore
// pipeline's 16 MiB of read buffers, the store's bounce and write buffers:
// 23.25 MiB on the host backend with 64 KiB pages, its buffer_bytes): kept
// out of an automatic budget until it is made.
constexpr uint64_t kDiskBufferReserve = 24 << 20;

// How a host memory budget divides on a device: the tiered pages it keeps
// resident (the host backend's mapped share) and its host tier (staging).
struct HostShares {
  uint64_t device = 0, host = 0;
};

// What one look at the wall found. The wall is the level with the least
// room (limit - used): the process's cgroup, an ancestor, or the machine.
struct WallReading {
  enum class Source : uint8_t { kNone = 0, kMemAvailable = 1, kCgroupV1 = 2, kCgroupV2 = 3 };
  Source source = Source::kNone;
  uint64_t limit = 0;  // bytes the wall allows (the machine's: MemTotal)
  // Bytes charged within it now less inactive file pages, which the kernel
  // reclaims before it kills (kubelet's "working set"); the machine's:
  // MemTotal - MemAvailable. Mapped weights the engine reads every step
  // stay active, so they count; cold code and a model file read once do
  // not: the kernel gives that room to anonymous memory too.

  uint64_t used = 0;
  uint64_t swap_limit = kNoLimit;  // v2 memory.swap.max, v1 memsw - mem, where set
  // Anonymous pages on the inactive list (memory.stat inactive_anon; shmem,
  // kvtier's own tiered pages among them), and the bytes the cgroup may
  // still put in swap: the least room any level's swap limit leaves on the
  // way up, and the machine's SwapFree; 0 where it cannot swap (no swap
  // space, memory.swappiness 0 at any v1 level, vm.swappiness 0 under v2,
  // memory.swap.max 0) and at the machine's wall. The kernel swaps cold
  // anonymous memory out when the wall is met, so up to swap_room of it is
  // room, as inactive file pages are.
  uint64_t inactive_anon = 0;
  uint64_t swap_room = 0;
  // v2 memory.events high + max + oom of the process's own cgroup: rises
  // each time the cgroup meets its wall.
  uint64_t events = 0;
  std::string where;    // the file that set the limit (or /proc/meminfo)
  std::string problem;  // the first file that could not be read or made sense of; "" if none

  uint64_t room() const { return limit > used ? limit - used : 0; }
};

const char* WallSourceName(WallReading::Source source);

// Reads the wall: /proc/self/cgroup and /proc/self/mountinfo find the memory
// cgroup (v1 where the memory controller is mounted there, else v2), its
// limits are read on the way up to the mount, and /proc/meminfo gives the
// machine's. Never fails: what cannot be read is said in `problem` and left
// out (a level that cannot be read sets no limit; /proc/meminfo always
// bounds the wall).
WallReading ReadMemoryWall(Env& env, const std::string& root = "");

// The automatic budget at start, before any page is tiered: one look at the
// wall (stored in *wall). What WallBudget::Next gives on a first look.
uint64_t StartBudget(Env& env, const std::string& root, uint64_t floor, uint64_t own_reserve,
                     WallReading* wall);

// A budget the user fixed (KVTIER_HOST_BUDGET) against the wall: one above
// the wall itself cannot be held and is capped to StartBudget; *said gets
// the one line that says so ("" when it stands).
uint64_t CapFixedBudget(uint64_t fixed, Env& env, const std::string& root, uint64_t floor,
                        uint64_t own_reserve, std::string* said);

// The parsing steps, for tests.
struct CgroupPaths {
  std::string v1_memory;  // the path of the line whose controllers include memory
  std::string v2;         // the path of the "0::" line
};
CgroupPaths ParseProcCgroup(std::string_view text);
struct CgroupMounts {
  std::string v1_point, v1_root;  // the cgroup mount with the memory option
  std::string v2_point, v2_root;  // the cgroup2 mount
};
CgroupMounts ParseMountinfo(std::string_view text);
// A limit file's value: a number, "max" (kNoLimit) or, for v1, a number of
// 2^62 or more (its "unlimited", 9223372036854771712). false: garbage.
bool ParseLimit(std::string_view text, uint64_t* out);
// The value of `key` in a "key value" file (memory.stat, memory.events,
// /proc/meminfo with `unit_kib`); false when absent or not a number.
bool StatValue(std::string_view text, std::string_view key, uint64_t* out, bool unit_kib = false);

// The automatic budget that follows the wall. Each look gives the wall and
// the bytes of tiered pages in memory now (they are charged within it, and
// are the budget's own). The budget is the room the wall leaves after the
// other memory (what is charged less the tiered pages, and less the cold
// anonymous memory the kernel can swap: inactive anonymous pages beyond the
// tiered ones, as many as the swap has room for) and a headroom: a thirty-second of the wall,
// at least 4 MiB (what the other memory may grow by between two looks, and the kernel's own), and
// the buffers kvtier has still to make (its disk tier's read and write
// buffers, made at the first spill: `own_reserve` less what is already
// made). It shrinks at once; it grows only by more than a sixteenth (no churn
// on noise); when the cgroup met its wall since the last look (v2
// memory.events) with less room left than the headroom, it also cuts an
// eighth more, and does not grow for the next 3 s of looks. Never below `floor`, the least the
// backend can work with.
class WallBudget {
 public:
  struct Look {
    WallReading wall;
    uint64_t tiered_in_memory = 0;
    uint64_t own_buffers = 0;  // bytes of kvtier's buffers made so far
  };
  WallBudget(uint64_t floor, uint64_t own_reserve) : floor_(floor), own_reserve_(own_reserve) {}

  // The budget for this look (also budget()).
  uint64_t Next(const Look& look);
  uint64_t budget() const { return budget_; }
  uint64_t other() const { return other_; }          // the wall's other memory, at the last look
  uint64_t swappable() const { return swappable_; }  // cold memory left out of it, at the last look
  uint64_t headroom() const { return headroom_; }
  bool at_floor() const { return at_floor_; }
  // One line: the wall, its other memory, the headroom and the budget.
  std::string Why(const WallReading& wall) const;

 private:
  const uint64_t floor_;
  const uint64_t own_reserve_;
  uint64_t budget_ = 0;
  uint64_t other_ = 0;
  uint64_t swappable_ = 0;
  uint64_t headroom_ = 0;
  uint64_t events_ = 0;
  bool have_events_ = false;
  bool at_floor_ = false;
  uint32_t hold_looks_ = 0;  // looks left before the budget may grow again
};

}  // namespace kvtier
