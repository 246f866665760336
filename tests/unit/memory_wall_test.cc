// The memory wall (runtime/memory_wall.h) read from fake trees of /proc and
// cgroup files through the Env seam: v1 and v2 hierarchies, nested limits,
// "max" and v1's unlimited, missing and unreadable files, garbage, a cgroup
// that moves; and the automatic budget that follows it.
#include "runtime/memory_wall.h"

#include <filesystem>
#include <string>

#include "gtest/gtest.h"
#include "runtime/storage/env.h"
#include "tests/testing/wall_tree.h"

namespace kvtier {
namespace {

using testing::FakeTree;
using testing::kV1Unlimited;

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;
WallReading Read(const FakeTree& tree) { return ReadMemoryWall(*Env::Default(), tree.root()); }

TEST(MemoryWall, V1TakesTheTightestLevelOnTheWayUp) {
  FakeTree t;
  t.Machine();
  t.V1("/kubepods/pod1/ctr");
  t.V1Level("/kubepods", kV1Unlimited, 900 * kMiB);
  t.V1Level("/kubepods/pod1", std::to_string(64 * kMiB), 30 * kMiB, 10 * kMiB);
  t.V1Level("/kubepods/pod1/ctr", kV1Unlimited, 25 * kMiB);
  const WallReading w = Read(t);
  EXPECT_EQ(w.source, WallReading::Source::kCgroupV1);
  EXPECT_EQ(w.limit, 64 * kMiB);
  EXPECT_EQ(w.used, 20 * kMiB);  // usage less inactive file pages
  EXPECT_EQ(w.where, "/sys/fs/cgroup/memory/kubepods/pod1/memory.limit_in_bytes");
  EXPECT_EQ(w.problem, "");
}

TEST(MemoryWall, TheLevelWithLeastRoomWinsNotTheLowestLimit) {
  FakeTree t;
  t.Machine();
  t.V2("/a/b");
  t.V2Level("/a", std::to_string(100 * kMiB), "max", 90 * kMiB);  // 10 MiB of room
  t.V2Level("/a/b", std::to_string(50 * kMiB), "max", 5 * kMiB);  // 45 MiB of room
  const WallReading w = Read(t);
  EXPECT_EQ(w.source, WallReading::Source::kCgroupV2);
  EXPECT_EQ(w.limit, 100 * kMiB);
  EXPECT_EQ(w.room(), 10 * kMiB);
}

TEST(MemoryWall, V2HighBelowMaxIsTheWall) {
  FakeTree t;
  t.Machine();
  t.V2("/svc");
  t.V2Level("/svc", std::to_string(200 * kMiB), std::to_string(150 * kMiB), 40 * kMiB, 8 * kMiB);
  t.Write("/sys/fs/cgroup/svc/memory.swap.max", "0\n");
  t.Write("/sys/fs/cgroup/svc/memory.events", "low 0\nhigh 3\nmax 2\noom 1\noom_kill 1\n");
  const WallReading w = Read(t);
  EXPECT_EQ(w.limit, 150 * kMiB);
  EXPECT_EQ(w.used, 32 * kMiB);
  EXPECT_EQ(w.swap_limit, 0u);
  EXPECT_EQ(w.events, 6u);  // high + max + oom
  EXPECT_EQ(w.where, "/sys/fs/cgroup/svc/memory.high");
}

TEST(MemoryWall, UnlimitedCgroupsLeaveTheMachinesAvailableMemory) {
  FakeTree t;
  t.Machine(16 << 20, 12 << 20);
  t.V2("/user.slice");
  t.V2Level("/user.slice", "max", "max", 3 * kGiB);
  WallReading w = Read(t);
  EXPECT_EQ(w.source, WallReading::Source::kMemAvailable);
  EXPECT_EQ(w.limit, 16 * kGiB);
  EXPECT_EQ(w.room(), 12 * kGiB);
  EXPECT_EQ(w.where, "/proc/meminfo");

  FakeTree v1;
  v1.Machine(16 << 20, 12 << 20);
  v1.V1("/");
  v1.V1Level("", kV1Unlimited, 3 * kGiB);
  EXPECT_EQ(Read(v1).source, WallReading::Source::kMemAvailable);
}

TEST(MemoryWall, TheMachineBoundsACgroupLimitAboveIt) {
  // A pod limited to 64 GiB on a host with 2 GiB available.
  FakeTree t;
  t.Machine(16 << 20, 2 << 20);
  t.V1("/pod");
  t.V1Level("/pod", std::to_string(64 * kGiB), kGiB);
  const WallReading w = Read(t);
  EXPECT_EQ(w.source, WallReading::Source::kMemAvailable);
  EXPECT_EQ(w.room(), 2 * kGiB);
}

TEST(MemoryWall, AContainersOwnViewOfItsCgroupIsFound) {
  // The memory hierarchy mounted from the container's cgroup down: its
  // root is the path /proc/self/cgroup shows.
  FakeTree t;
  t.Machine();
  t.V1("/docker/abc/inner", "/docker/abc");
  t.V1Level("/inner", std::to_string(40 * kMiB), 2 * kMiB);
  const WallReading w = Read(t);
  EXPECT_EQ(w.limit, 40 * kMiB);
  EXPECT_EQ(w.where, "/sys/fs/cgroup/memory/inner/memory.limit_in_bytes");
}

TEST(MemoryWall, ACgroupThatMovesIsFollowed) {
  FakeTree t;
  t.Machine();
  t.V2("/small");
  t.V2Level("/small", std::to_string(32 * kMiB), "max", kMiB);
  t.V2Level("/large", std::to_string(512 * kMiB), "max", kMiB);
  EXPECT_EQ(Read(t).limit, 32 * kMiB);
  t.Write("/proc/self/cgroup", "0::/large\n");
  EXPECT_EQ(Read(t).limit, 512 * kMiB);
}

TEST(MemoryWall, GarbageIsSaidAndSetsNoLimit) {
  FakeTree t;
  t.Machine(16 << 20, 12 << 20);
  t.V2("/g");
  t.V2Level("/g", "lots", "max", kMiB);
  const WallReading w = Read(t);
  EXPECT_EQ(w.source, WallReading::Source::kMemAvailable);
  EXPECT_NE(w.problem.find("/sys/fs/cgroup/g/memory.max: 'lots' is not a byte count"),
            std::string::npos)
      << w.problem;

  FakeTree usage;
  usage.Machine();
  usage.V1("/u");
  usage.V1Level("/u", std::to_string(64 * kMiB), 0);
  usage.Write("/sys/fs/cgroup/memory/u/memory.usage_in_bytes", "-5\n");
  const WallReading u = Read(usage);
  EXPECT_EQ(u.source, WallReading::Source::kMemAvailable);
  EXPECT_NE(u.problem.find("memory.usage_in_bytes: '-5' is not a number"), std::string::npos)
      << u.problem;
}

TEST(MemoryWall, MissingFilesAreNoLimitAndNoProblem) {
  FakeTree t;
  t.Machine();
  t.V2("/gone");  // the cgroup's directory does not exist
  WallReading w = Read(t);
  EXPECT_EQ(w.source, WallReading::Source::kMemAvailable);
  EXPECT_EQ(w.problem, "");

  FakeTree bare;  // not even /proc/meminfo
  w = Read(bare);
  EXPECT_EQ(w.source, WallReading::Source::kNone);
  EXPECT_NE(w.problem.find("/proc/meminfo"), std::string::npos);
}

TEST(MemoryWall, AnUnreadableFileIsAProblem) {
  // A directory where the limit file should be: open works, read fails.
  FakeTree t;
  t.Machine(16 << 20, 12 << 20);
  t.V2("/odd");
  t.V2Level("/odd", std::to_string(64 * kMiB), "max", kMiB);
  t.Remove("/sys/fs/cgroup/odd/memory.max");
  std::filesystem::create_directories(t.root() + "/sys/fs/cgroup/odd/memory.max");
  const WallReading w = Read(t);
  EXPECT_NE(w.problem.find("memory.max: Is a directory"), std::string::npos) << w.problem;
  EXPECT_EQ(w.source, WallReading::Source::kMemAvailable);
}

TEST(MemoryWall, APathOutsideTheMountIsSaid) {
  FakeTree t;
  t.Machine();
  t.V1("/elsewhere/x", "/docker/abc");
  const WallReading w = Read(t);
  EXPECT_EQ(w.source, WallReading::Source::kMemAvailable);
  EXPECT_NE(w.problem.find("/elsewhere/x"), std::string::npos) << w.problem;
}

TEST(MemoryWall, ColdAnonymousMemoryIsRoomOnlyWhereTheCgroupCanSwap) {
  FakeTree t;
  t.Machine(16 << 20, 12 << 20, 1 << 20);  // 1 GiB of swap free
  t.V1("/pod");
  t.V1Level("/pod", std::to_string(100 * kMiB), 80 * kMiB, 0, 30 * kMiB);
  WallReading w = Read(t);
  EXPECT_EQ(w.inactive_anon, 30 * kMiB);  // the hierarchical total_, not the level's own
  EXPECT_EQ(w.swap_room, kGiB);           // no memsw limit: the machine's swap
  // memory+swap limited to 110 MiB, 5 MiB of it in swap: 5 MiB more fit.
  t.Write("/sys/fs/cgroup/memory/pod/memory.memsw.limit_in_bytes", std::to_string(110 * kMiB));
  t.Write("/sys/fs/cgroup/memory/pod/memory.memsw.usage_in_bytes", std::to_string(85 * kMiB));
  w = Read(t);
  EXPECT_EQ(w.swap_limit, 10 * kMiB);
  EXPECT_EQ(w.swap_room, 5 * kMiB);
  EXPECT_EQ(w.problem, "");
  // A cgroup that does not swap its anonymous memory.
  t.Write("/sys/fs/cgroup/memory/pod/memory.swappiness", "0\n");
  EXPECT_EQ(Read(t).swap_room, 0u);
  t.Write("/sys/fs/cgroup/memory/pod/memory.swappiness", "60\n");
  EXPECT_EQ(Read(t).swap_room, 5 * kMiB);
  // A machine without swap.
  t.Machine(16 << 20, 12 << 20, 0);
  EXPECT_EQ(Read(t).swap_room, 0u);
  // A level above with no memory limit of its own still limits the swap:
  // memory + swap at most 100 MiB, 97 MiB of it used.
  FakeTree nested;
  nested.Machine(16 << 20, 12 << 20, 1 << 20);
  nested.V1("/kube/pod");
  nested.V1Level("/kube/pod", std::to_string(100 * kMiB), 80 * kMiB, 0, 30 * kMiB);
  nested.Write("/sys/fs/cgroup/memory/kube/memory.limit_in_bytes", kV1Unlimited);
  nested.Write("/sys/fs/cgroup/memory/kube/memory.memsw.limit_in_bytes",
               std::to_string(100 * kMiB));
  nested.Write("/sys/fs/cgroup/memory/kube/memory.memsw.usage_in_bytes", std::to_string(97 * kMiB));
  w = Read(nested);
  EXPECT_EQ(w.where, "/sys/fs/cgroup/memory/kube/pod/memory.limit_in_bytes");
  EXPECT_EQ(w.swap_room, 3 * kMiB);
  // Swappiness 0 anywhere on the way up.
  nested.Write("/sys/fs/cgroup/memory/kube/memory.memsw.limit_in_bytes", kV1Unlimited);
  EXPECT_EQ(Read(nested).swap_room, kGiB);
  nested.Write("/sys/fs/cgroup/memory/memory.swappiness", "0\n");
  EXPECT_EQ(Read(nested).swap_room, 0u);
  // v2: memory.swap.max less memory.swap.current; 0 swaps nothing.
  FakeTree v2;
  v2.Machine(16 << 20, 12 << 20, 1 << 20);
  v2.V2("/svc");
  v2.V2Level("/svc", std::to_string(100 * kMiB), "max", 80 * kMiB, 0, 40 * kMiB);
  EXPECT_EQ(Read(v2).swap_room, kGiB);  // no swap.max file: the machine's swap
  v2.Write("/sys/fs/cgroup/svc/memory.swap.max", std::to_string(20 * kMiB));
  v2.Write("/sys/fs/cgroup/svc/memory.swap.current", std::to_string(15 * kMiB));
  w = Read(v2);
  EXPECT_EQ(w.inactive_anon, 40 * kMiB);
  EXPECT_EQ(w.swap_room, 5 * kMiB);
  v2.Write("/sys/fs/cgroup/svc/memory.swap.max", "0\n");
  EXPECT_EQ(Read(v2).swap_room, 0u);
  // A parent that swaps nothing, with no memory limit of its own.
  FakeTree v2nested;
  v2nested.Machine(16 << 20, 12 << 20, 1 << 20);
  v2nested.V2("/a/b");
  v2nested.V2Level("/a/b", std::to_string(100 * kMiB), "max", 80 * kMiB, 0, 40 * kMiB);
  v2nested.V2Level("/a", "max", "max", 80 * kMiB);
  EXPECT_EQ(Read(v2nested).swap_room, kGiB);
  v2nested.Write("/sys/fs/cgroup/a/memory.swap.max", "0\n");
  EXPECT_EQ(Read(v2nested).swap_room, 0u);
  // v2 reclaims with the machine's swappiness: at 0, file pages only.
  v2nested.Write("/sys/fs/cgroup/a/memory.swap.max", "max\n");
  v2nested.Write("/proc/sys/vm/swappiness", "0\n");
  EXPECT_EQ(Read(v2nested).swap_room, 0u);
  v2nested.Write("/proc/sys/vm/swappiness", "60\n");
  EXPECT_EQ(Read(v2nested).swap_room, kGiB);
  // Garbage in swap.current: said, and counted as nothing swapped yet.
  v2.Write("/sys/fs/cgroup/svc/memory.swap.max", std::to_string(20 * kMiB));
  v2.Write("/sys/fs/cgroup/svc/memory.swap.current", "lots\n");
  w = Read(v2);
  EXPECT_EQ(w.swap_room, 20 * kMiB);
  EXPECT_NE(w.problem.find("memory.swap.current"), std::string::npos) << w.problem;
  // The machine's own wall (MemAvailable) counts no swap.
  FakeTree none;
  none.Machine(16 << 20, 12 << 20, 1 << 20);
  EXPECT_EQ(Read(none).source, WallReading::Source::kMemAvailable);
  EXPECT_EQ(Read(none).swap_room, 0u);
}

TEST(MemoryWall, ParsingSteps) {
  uint64_t v = 0;
  EXPECT_TRUE(ParseLimit("max\n", &v));
  EXPECT_EQ(v, kNoLimit);
  EXPECT_TRUE(ParseLimit(kV1Unlimited, &v));
  EXPECT_EQ(v, kNoLimit);
  EXPECT_TRUE(ParseLimit(" 4096 \n", &v));
  EXPECT_EQ(v, 4096u);
  for (const char* bad : {"", "12abc", "-1", "99999999999999999999999", "1e9", "max max"}) {
    EXPECT_FALSE(ParseLimit(bad, &v)) << bad;
  }
  EXPECT_TRUE(StatValue("MemTotal: 2 kB\nMemAvailable:   1 kB\n", "MemAvailable", &v, true));
  EXPECT_EQ(v, 1024u);
  EXPECT_FALSE(StatValue("inactive_file_x 5\n", "inactive_file", &v));
  EXPECT_TRUE(StatValue("total_inactive_file 7\ninactive_file 5\n", "inactive_file", &v));
  EXPECT_EQ(v, 5u);

  const CgroupPaths p = ParseProcCgroup("5:cpu,memory:/a:b\n0::/c\n");
  EXPECT_EQ(p.v1_memory, "/a:b");
  EXPECT_EQ(p.v2, "/c");
  const CgroupMounts m = ParseMountinfo(
      "30 1 0:5 / /sys/fs/cgroup/my\\040memory rw shared:1 - cgroup cgroup rw,memory\n"
      "31 1 0:6 /x /u rw - cgroup2 none rw\nshort line\n");
  EXPECT_EQ(m.v1_point, "/sys/fs/cgroup/my memory");
  EXPECT_EQ(m.v1_root, "/");
  EXPECT_EQ(m.v2_point, "/u");
  EXPECT_EQ(m.v2_root, "/x");
}

WallReading Wall(uint64_t limit, uint64_t used, uint64_t events = 0) {
  WallReading w;
  w.source = WallReading::Source::kCgroupV2;
  w.limit = limit;
  w.used = used;
  w.events = events;
  w.where = "/sys/fs/cgroup/x/memory.max";
  return w;
}

TEST(WallBudget, TheRoomLeftAfterOtherMemoryAndHeadroom) {
  WallBudget b(kMiB, 0);
  WallBudget::Look look;
  look.wall = Wall(1024 * kMiB, 300 * kMiB);
  look.tiered_in_memory = 100 * kMiB;  // the budget's own: not other memory
  // other 200 MiB, headroom 1024/32 = 32 MiB
  EXPECT_EQ(b.Next(look), (1024 - 200 - 32) * kMiB);
  EXPECT_EQ(b.other(), 200 * kMiB);
  EXPECT_EQ(b.headroom(), 32 * kMiB);
}

TEST(WallBudget, ColdAnonymousMemoryBeyondTheTieredPagesIsRoom) {
  WallBudget b(kMiB, 0);
  WallBudget::Look look;
  look.wall = Wall(1024 * kMiB, 300 * kMiB);
  look.tiered_in_memory = 100 * kMiB;
  look.wall.inactive_anon = 150 * kMiB;  // the tiered pages may all be among them
  look.wall.swap_room = kGiB;
  // other: 300 - 100 tiered - (150 - 100) cold = 150 MiB
  EXPECT_EQ(b.Next(look), (1024 - 150 - 32) * kMiB);
  EXPECT_EQ(b.other(), 150 * kMiB);
  EXPECT_EQ(b.swappable(), 50 * kMiB);
  EXPECT_NE(b.Why(look.wall).find("less 50 MiB of cold memory the kernel can swap"),
            std::string::npos)
      << b.Why(look.wall);
  // As much as the swap takes.
  look.wall.swap_room = 20 * kMiB;
  b.Next(look);
  EXPECT_EQ(b.other(), 180 * kMiB);
  // No swap: none of it is room, and the line says nothing of it.
  look.wall.swap_room = 0;
  b.Next(look);
  EXPECT_EQ(b.other(), 200 * kMiB);
  EXPECT_EQ(b.Why(look.wall).find("cold memory"), std::string::npos);
  // Fewer inactive anonymous pages than tiered ones: nothing beyond them.
  look.wall.swap_room = kGiB;
  look.wall.inactive_anon = 80 * kMiB;
  b.Next(look);
  EXPECT_EQ(b.other(), 200 * kMiB);
}

TEST(WallBudget, BuffersStillToBeMadeAreKeptOut) {
  WallBudget b(kMiB, 16 * kMiB);
  WallBudget::Look look;
  look.wall = Wall(40 * kMiB, 4 * kMiB);
  look.own_buffers = 6 * kMiB;
  // headroom: 4 MiB (the least) + 10 MiB of buffers not yet made
  EXPECT_EQ(b.Next(look), (40 - 4 - 4 - 10) * kMiB);
}

TEST(WallBudget, ShrinksAtOnceGrowsOnlyByMoreThanASixteenth) {
  WallBudget b(kMiB, 0);
  WallBudget::Look look;
  look.wall = Wall(1024 * kMiB, 32 * kMiB);
  const uint64_t first = b.Next(look);  // 1024 - 32 - 32 = 960 MiB
  EXPECT_EQ(first, 960 * kMiB);
  look.wall.used = 64 * kMiB;
  EXPECT_EQ(b.Next(look), 928 * kMiB);  // other memory grew: at once
  look.wall.used = 34 * kMiB;           // room for 958 MiB: within a sixteenth
  EXPECT_EQ(b.Next(look), 928 * kMiB);
  look.wall.used = 0;  // room for 992 MiB: more than a sixteenth over 928
  EXPECT_EQ(b.Next(look), 992 * kMiB);
}

TEST(WallBudget, MeetingTheWallWithLittleRoomCutsAnEighthMore) {
  WallBudget b(kMiB, 0);
  WallBudget::Look look;
  look.wall = Wall(1024 * kMiB, 32 * kMiB, 5);
  EXPECT_EQ(b.Next(look), 960 * kMiB);  // the first look's events are history
  // A full cgroup reclaiming page cache meets its wall with room to spare:
  // no cut.
  look.wall.events = 6;
  EXPECT_EQ(b.Next(look), 960 * kMiB);
  // With less room than the headroom (32 MiB), it does.
  look.tiered_in_memory = 1000 * kMiB;
  look.wall.used = 1032 * kMiB;  // other memory still 32 MiB
  look.wall.events = 7;
  EXPECT_EQ(b.Next(look), 840 * kMiB);  // 960 less an eighth
  // No new event: the room looks like 960 again, but the wall said less.
  for (int i = 0; i < 29; ++i) EXPECT_EQ(b.Next(look), 840 * kMiB) << i;
  EXPECT_EQ(b.Next(look), 960 * kMiB);  // 3 s of looks later
}

TEST(WallBudget, AWallBelowTheOtherMemoryGivesTheFloorAndSaysSo) {
  WallBudget b(2 * kMiB, 0);
  WallBudget::Look look;
  look.wall = Wall(40 * kMiB, 60 * kMiB);
  EXPECT_EQ(b.Next(look), 2 * kMiB);
  EXPECT_TRUE(b.at_floor());
  EXPECT_NE(b.Why(look.wall).find("the least kvtier can work with"), std::string::npos);
}

TEST(WallBudget, NoWallKeepsTheBudget) {
  WallBudget b(2 * kMiB, 0);
  WallBudget::Look look;
  look.wall = Wall(64 * kMiB, 0);
  const uint64_t had = b.Next(look);
  look.wall = WallReading{};
  EXPECT_EQ(b.Next(look), had);
}

TEST(WallBudget, AFixedBudgetAboveTheWallIsCappedInOneLine) {
  FakeTree t;
  t.Machine();
  t.V1("/pod");
  t.V1Level("/pod", std::to_string(40 * kMiB), 0);
  std::string said;
  const uint64_t capped = CapFixedBudget(64 * kMiB, *Env::Default(), t.root(), kMiB, 0, &said);
  EXPECT_LT(capped, 40 * kMiB);
  EXPECT_GE(capped, kMiB);
  EXPECT_NE(said.find("KVTIER_HOST_BUDGET=64 MiB is above the memory wall"), std::string::npos)
      << said;
  EXPECT_EQ(said.find('\n'), std::string::npos);
  EXPECT_EQ(CapFixedBudget(8 * kMiB, *Env::Default(), t.root(), kMiB, 0, &said), 8 * kMiB);
  EXPECT_EQ(said, "");
}

}  // namespace
}  // namespace kvtier
