// Tests of the stats segment: the runtime's writer (runtime/stats_segment.cc)
// against the tools' reader (tools/stats): file mode, removal, stale and
// reused-pid cleanup, refused layouts, region rows and events. Snapshot
// consistency under concurrent publishing is in stats_seqlock_test.cc.
#include "runtime/stats_segment.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "tests/testing/skip_without.h"
#include "tests/tools/tool_test_util.h"
#include "tools/stats/process_check.h"
#include "tools/stats/stats_fields.h"
#include "tools/stats/stats_reader.h"

namespace kvtier {
namespace {

using stats::ReadResult;
using stats::ReadState;
using stats::SegmentDir;
using testing::TempDir;

constexpr size_t kPage = 2u << 20;

StatsIdentity TestIdentity() {
  StatsIdentity id;
  id.command = "stats_test";
  id.backend = "sim";
  id.policy = "lru";
  id.disk_io = "off";
  id.page_size = kPage;
  return id;
}

std::string SegmentPath(const TempDir& dir, pid_t pid) {
  return dir.path() + "/" + KVTIER_STATS_PREFIX + std::to_string(pid);
}

std::unique_ptr<StatsSegment> MustCreate(const TempDir& dir) {
  auto seg = StatsSegment::Create(dir.path(), TestIdentity());
  EXPECT_TRUE(seg.ok()) << seg.status().message();
  return seg.ok() ? std::move(seg).value() : nullptr;
}

std::unique_ptr<SegmentDir> MustOpen(const TempDir& dir) {
  std::string error;
  auto d = SegmentDir::Open(dir.path(), &error);
  EXPECT_NE(d, nullptr) << error;
  return d;
}

RegionPtr MakeRegion(RegionId id, size_t pages, const std::string& tag) {
  return std::make_shared<Region>(id, 0x7f0000000000 + id * (1ull << 32), pages * kPage, kPage,
                                  tag);
}

TEST(StatsSegmentTest, CreatesPrivateFileAndRemovesItOnDestroy) {
  TempDir dir;
  auto seg = MustCreate(dir);
  ASSERT_NE(seg, nullptr);
  EXPECT_EQ(seg->path(), SegmentPath(dir, getpid()));
  struct stat st;
  ASSERT_EQ(stat(seg->path().c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(static_cast<size_t>(st.st_size), sizeof(kvtier_stats_segment));
  const std::string path = seg->path();
  seg.reset();
  EXPECT_FALSE(testing::FileExists(path));
}

TEST(StatsSegmentTest, ModeIs0600WhateverTheUmask) {
  TempDir dir;
  mode_t old = umask(0);
  auto seg = MustCreate(dir);
  umask(old);
  ASSERT_NE(seg, nullptr);
  struct stat st;
  ASSERT_EQ(stat(seg->path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
}

TEST(StatsSegmentTest, SecondSegmentInOneProcessIsRefused) {
  TempDir dir;
  auto first = MustCreate(dir);
  ASSERT_NE(first, nullptr);
  auto second = StatsSegment::Create(dir.path(), TestIdentity());
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("already publishes"), std::string::npos)
      << second.status().message();
  EXPECT_TRUE(testing::FileExists(first->path()));  // the live one is untouched
}

TEST(StatsSegmentTest, ReplacesStaleFileCarryingOurPid) {
  TempDir dir;
  const char junk[] = "left by a process that had our pid";
  ASSERT_TRUE(testing::WriteFile(SegmentPath(dir, getpid()), junk, sizeof junk));
  auto seg = MustCreate(dir);
  ASSERT_NE(seg, nullptr);
  auto reader = MustOpen(dir);
  ReadResult r = reader->Read(getpid());
  ASSERT_EQ(r.state, ReadState::kOk) << r.message;
  EXPECT_STREQ(r.snapshot->command, "stats_test");
}

TEST(StatsSegmentTest, NotWritableDirectoryGivesClearError) {
  auto seg = StatsSegment::Create("/nonexistent-kvtier-dir", TestIdentity());
  ASSERT_FALSE(seg.ok());
  EXPECT_NE(seg.status().message().find("/nonexistent-kvtier-dir"), std::string::npos);
  EXPECT_NE(seg.status().message().find("KVTIER_STATS=0"), std::string::npos);
}

TEST(StatsSegmentTest, ReaderSeesIdentityCountersRegionsAndEvents) {
  TempDir dir;
  auto seg = MustCreate(dir);
  ASSERT_NE(seg, nullptr);
  Counters c;
  Counters::Set(c.device_budget_bytes, 8ull << 30);
  Counters::Set(c.device_used_bytes, 3ull << 30);
  Counters::Add(c.demoted_bytes, 123456);
  Counters::Add(c.faults, 7);
  std::vector<RegionPtr> regions = {MakeRegion(1, 64, "alloc#1 libchat.so"),
                                    MakeRegion(2, 4, "alloc#2")};
  seg->AddEvent("disk tier degraded: ENOSPC");
  seg->SetDiskIo("io_uring+direct");
  seg->Publish(c, regions);

  auto reader = MustOpen(dir);
  ReadResult r = reader->Read(getpid());
  ASSERT_EQ(r.state, ReadState::kOk) << r.message;
  const kvtier_stats_segment& s = *r.snapshot;
  EXPECT_EQ(s.magic, KVTIER_STATS_MAGIC);
  EXPECT_EQ(s.version, KVTIER_STATS_VERSION);
  EXPECT_EQ(s.size, sizeof(kvtier_stats_segment));
  EXPECT_EQ(s.pid, getpid());
  EXPECT_EQ(s.page_size, kPage);
  EXPECT_EQ(s.seq % 2, 0u);
  EXPECT_GE(s.update_time_ns, s.start_time_ns);
  EXPECT_EQ(s.start_ticks, stats::ProcessStartTicks(getpid()));
  EXPECT_EQ(stats::FieldString(s.backend), "sim");
  EXPECT_EQ(stats::FieldString(s.policy), "lru");
  EXPECT_EQ(stats::FieldString(s.disk_io), "io_uring+direct");
  EXPECT_EQ(s.device_budget_bytes, 8ull << 30);
  EXPECT_EQ(s.device_used_bytes, 3ull << 30);
  EXPECT_EQ(s.demoted_bytes, 123456u);
  EXPECT_EQ(s.faults, 7u);
  EXPECT_EQ(s.region_row_count, 2u);
  EXPECT_EQ(s.regions_omitted, 0u);
  EXPECT_EQ(s.region_rows[0].id, 1u);
  EXPECT_EQ(s.region_rows[0].pages_untouched, 64u);
  EXPECT_EQ(stats::FieldString(s.region_rows[0].tag), "alloc#1 libchat.so");
  EXPECT_EQ(s.region_rows[1].size, 4 * kPage);
  EXPECT_EQ(s.event_count, 1u);
  EXPECT_EQ(stats::FieldString(s.events[0].text), "disk tier degraded: ENOSPC");
  EXPECT_GE(s.events[0].time_ns, s.start_time_ns);

  std::vector<RegionPtr> many;
  for (RegionId i = 0; i < KVTIER_STATS_MAX_REGIONS + 5; ++i) many.push_back(MakeRegion(i, 1, ""));
  seg->Publish(c, many);
  r = reader->Read(getpid());
  ASSERT_EQ(r.state, ReadState::kOk) << r.message;
  EXPECT_EQ(r.snapshot->region_row_count, unsigned{KVTIER_STATS_MAX_REGIONS});
  EXPECT_EQ(r.snapshot->regions_omitted, 5u);
}

TEST(StatsSegmentTest, EventRingKeepsTheNewest) {
  TempDir dir;
  auto seg = MustCreate(dir);
  ASSERT_NE(seg, nullptr);
  Counters c;
  const int total = KVTIER_STATS_MAX_EVENTS + 8;
  for (int i = 0; i < total; ++i) {
    seg->AddEvent("event " + std::to_string(i));
    if (i % 10 == 9) seg->Publish(c, {});
  }
  seg->AddEvent(std::string(200, 'x'));  // longer than a slot: truncated, terminated
  seg->Publish(c, {});
  auto reader = MustOpen(dir);
  ReadResult r = reader->Read(getpid());
  ASSERT_EQ(r.state, ReadState::kOk) << r.message;
  const kvtier_stats_segment& s = *r.snapshot;
  ASSERT_EQ(s.event_count, uint64_t(total) + 1);
  for (uint64_t i = s.event_count - KVTIER_STATS_MAX_EVENTS; i < uint64_t(total); ++i) {
    EXPECT_EQ(stats::FieldString(s.events[i % KVTIER_STATS_MAX_EVENTS].text),
              "event " + std::to_string(i));
  }
  EXPECT_EQ(stats::FieldString(s.events[total % KVTIER_STATS_MAX_EVENTS].text),
            std::string(sizeof s.events[0].text - 1, 'x'));
}

TEST(StatsSegmentTest, HeatByteIsALogScaleThatSaturates) {
  EXPECT_EQ(StatsSegment::HeatByte(0), 0);
  EXPECT_EQ(StatsSegment::HeatByte(1), 32);
  EXPECT_EQ(StatsSegment::HeatByte(2), 64);
  EXPECT_EQ(StatsSegment::HeatByte(3), 80);
  EXPECT_EQ(StatsSegment::HeatByte(4), 96);
  EXPECT_EQ(StatsSegment::HeatByte(64), 224);
  EXPECT_EQ(StatsSegment::HeatByte(96), 240);
  EXPECT_EQ(StatsSegment::HeatByte(125), 254);
  EXPECT_EQ(StatsSegment::HeatByte(128), 255);
  EXPECT_EQ(StatsSegment::HeatByte(UINT32_MAX), 255);
  for (uint32_t h = 0; h < 300; ++h) {
    EXPECT_LE(StatsSegment::HeatByte(h), StatsSegment::HeatByte(h + 1)) << h;
  }
}

TEST(StatsSegmentTest, RegionRowCountsTiersAndBuildsTheHeatStrip) {
  RegionPtr region = MakeRegion(7, 64, "kv");  // 2 pages per bucket
  for (size_t p = 0; p < 64; ++p) {
    PageRecord& rec = region->pages[p];
    Tier t = p < 20   ? Tier::kDevice
             : p < 40 ? Tier::kHost
             : p < 50 ? Tier::kDisk
                      : Tier::kUntouched;
    rec.tier.store(t);
    rec.heat = p < 2 ? 128 : p < 4 ? 1 : 0;
  }
  // Bucket 2 (pages 4, 5): a tie device/host goes to the device.
  region->pages[5].tier.store(Tier::kHost);
  kvtier_stats_region row;
  StatsSegment::FillRegionRow(*region, &row);
  EXPECT_EQ(row.id, 7u);
  EXPECT_EQ(row.size, 64 * kPage);
  EXPECT_EQ(row.page_size, kPage);
  EXPECT_EQ(row.pages_device, 19u);
  EXPECT_EQ(row.pages_host, 21u);
  EXPECT_EQ(row.pages_disk, 10u);
  EXPECT_EQ(row.pages_untouched, 14u);
  EXPECT_EQ(row.heat[0], 255);
  EXPECT_EQ(row.heat[1], 32);
  EXPECT_EQ(row.heat[2], 0);
  EXPECT_EQ(row.tier[0], 0);
  EXPECT_EQ(row.tier[2], 0);
  EXPECT_EQ(row.tier[10], 1);  // pages 20, 21
  EXPECT_EQ(row.tier[20], 2);  // pages 40, 41
  EXPECT_EQ(row.tier[31], 3);
  EXPECT_STREQ(row.tag, "kv");

  // Mixed heat in one bucket averages the per-page bytes: (255 + 0) / 2.
  region->pages[1].heat = 0;
  StatsSegment::FillRegionRow(*region, &row);
  EXPECT_EQ(row.heat[0], 128);
}

TEST(StatsSegmentTest, SmallRegionStretchesPagesOverBuckets) {
  RegionPtr region = MakeRegion(1, 4, "");
  region->pages[3].tier.store(Tier::kHost);
  region->pages[3].heat = 2;
  kvtier_stats_region row;
  StatsSegment::FillRegionRow(*region, &row);
  EXPECT_EQ(row.pages_untouched, 3u);
  EXPECT_EQ(row.pages_host, 1u);
  for (int b = 0; b < KVTIER_STATS_HEAT_BUCKETS; ++b) {
    const bool last_page = b >= 24;  // page 3 covers buckets 24..31
    EXPECT_EQ(row.tier[b], last_page ? 1 : 3) << b;
    EXPECT_EQ(row.heat[b], last_page ? 64 : 0) << b;
  }
}

TEST(StatsSegmentTest, ReaderRemovesSegmentOfDeadProcess) {
  TempDir dir;
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Dies without cleaning up, as after a crash or SIGKILL.
    auto seg = StatsSegment::Create(dir.path(), TestIdentity());
    _exit(seg.ok() ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  const std::string path = SegmentPath(dir, child);
  ASSERT_TRUE(testing::FileExists(path));

  auto reader = MustOpen(dir);
  std::vector<ReadResult> all = reader->ReadAll();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].state, ReadState::kStaleRemoved) << all[0].message;
  EXPECT_NE(all[0].message.find("gone"), std::string::npos) << all[0].message;
  EXPECT_FALSE(testing::FileExists(path));
}

TEST(StatsSegmentTest, CreateRemovesSegmentsOfDeadProcesses) {
  TempDir dir;
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto seg = StatsSegment::Create(dir.path(), TestIdentity());
    _exit(seg.ok() ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(testing::FileExists(SegmentPath(dir, child)));
  auto seg = MustCreate(dir);
  ASSERT_NE(seg, nullptr);
  EXPECT_FALSE(testing::FileExists(SegmentPath(dir, child)));
}

TEST(StatsSegmentTest, ReaderRemovesSegmentWhosePidWasReused) {
  TempDir dir;
  auto seg = MustCreate(dir);
  ASSERT_NE(seg, nullptr);
  auto reader = MustOpen(dir);
  ReadResult r = reader->Read(getpid());
  ASSERT_EQ(r.state, ReadState::kOk) << r.message;
  if (r.snapshot->start_ticks == 0) KVTIER_SKIP_WITHOUT("no /proc/self/stat here");
  // Pretend the segment was written by an earlier process with our pid.
  const uint64_t earlier = r.snapshot->start_ticks - 1;
  int fd = open(seg->path().c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(pwrite(fd, &earlier, sizeof earlier, offsetof(kvtier_stats_segment, start_ticks)),
            ssize_t(sizeof earlier));
  close(fd);
  r = reader->Read(getpid());
  EXPECT_EQ(r.state, ReadState::kStaleRemoved) << r.message;
  EXPECT_NE(r.message.find("another process"), std::string::npos) << r.message;
  EXPECT_FALSE(testing::FileExists(seg->path()));
}

TEST(StatsSegmentTest, ProcessStartTicksIsField22OfProcStat) {
  std::ifstream in("/proc/self/stat");
  if (!in) KVTIER_SKIP_WITHOUT("no /proc/self/stat here");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::istringstream fields(stat.substr(stat.rfind(')') + 1));
  std::vector<std::string> tokens;  // tokens[0] is field 3
  for (std::string t; fields >> t;) tokens.push_back(t);
  ASSERT_GT(tokens.size(), 19u);
  EXPECT_EQ(stats::ProcessStartTicks(getpid()), std::stoull(tokens[19]));
  EXPECT_EQ(stats::ProcessStartTicks(-1), 0u);
  EXPECT_EQ(stats::CheckProcess(getpid(), std::stoull(tokens[19])), stats::Liveness::kAlive);
  EXPECT_EQ(stats::CheckProcess(getpid(), std::stoull(tokens[19]) + 1), stats::Liveness::kReused);
  EXPECT_EQ(stats::CheckProcess(getpid(), 0), stats::Liveness::kAlive);
}

// Writes a hand-made segment for our own (live) pid.
void WriteHeader(const TempDir& dir, uint64_t magic, uint32_t version, uint32_t size,
                 size_t file_size) {
  std::vector<unsigned char> bytes(file_size, 0);
  kvtier_stats_segment head{};
  head.magic = magic;
  head.version = version;
  head.size = size;
  head.pid = getpid();
  if (file_size > 0) memcpy(bytes.data(), &head, std::min(file_size, sizeof head));
  ASSERT_TRUE(testing::WriteFile(SegmentPath(dir, getpid()), bytes.data(), bytes.size()));
}

TEST(StatsSegmentTest, ReaderRefusesOtherLayoutsWithAClearMessage) {
  TempDir dir;
  auto reader = MustOpen(dir);
  const size_t kSize = sizeof(kvtier_stats_segment);

  WriteHeader(dir, KVTIER_STATS_MAGIC, KVTIER_STATS_VERSION + 1, kSize, kSize);
  ReadResult r = reader->Read(getpid());
  EXPECT_EQ(r.state, ReadState::kRefused);
  const std::string expected = "version " + std::to_string(KVTIER_STATS_VERSION + 1) +
                               ", but this tool reads version " +
                               std::to_string(KVTIER_STATS_VERSION);
  EXPECT_NE(r.message.find(expected), std::string::npos) << r.message;
  EXPECT_TRUE(testing::FileExists(SegmentPath(dir, getpid())));  // a live process's: kept

  WriteHeader(dir, KVTIER_STATS_MAGIC, KVTIER_STATS_VERSION, kSize + 8, kSize + 8);
  r = reader->Read(getpid());
  EXPECT_EQ(r.state, ReadState::kRefused);
  EXPECT_NE(r.message.find("different builds"), std::string::npos) << r.message;

  WriteHeader(dir, 0x1234, KVTIER_STATS_VERSION, kSize, kSize);
  r = reader->Read(getpid());
  EXPECT_EQ(r.state, ReadState::kRefused);
  EXPECT_NE(r.message.find("not a kvtier stats segment"), std::string::npos) << r.message;

  WriteHeader(dir, 0, 0, 0, kSize);  // created, not yet filled
  EXPECT_EQ(reader->Read(getpid()).state, ReadState::kNotReady);
  WriteHeader(dir, 0, 0, 0, 0);  // created, not yet sized
  EXPECT_EQ(reader->Read(getpid()).state, ReadState::kNotReady);

  unlink(SegmentPath(dir, getpid()).c_str());
  ASSERT_EQ(symlink("/etc/passwd", SegmentPath(dir, getpid()).c_str()), 0);
  r = reader->Read(getpid());
  EXPECT_EQ(r.state, ReadState::kRefused);
  EXPECT_NE(r.message.find("symbolic link"), std::string::npos) << r.message;
}

TEST(StatsSegmentTest, ListIgnoresOtherNames) {
  TempDir dir;
  for (const char* name :
       {"kvtier.12", "kvtier.x1", "kvtier.", "kvtier.007", "other.5", "kvtier.99999999999"}) {
    ASSERT_TRUE(testing::WriteFile(dir.path() + "/" + name, "", 0));
  }
  auto reader = MustOpen(dir);
  EXPECT_EQ(reader->List(), std::vector<int32_t>{12});
}

TEST(StatsSegmentTest, ReaderGivesUpOnAWriterThatHoldsTheLock) {
  std::vector<uint64_t> words(sizeof(kvtier_stats_segment) / 8, 0);
  words[offsetof(kvtier_stats_segment, seq) / 8] = 3;  // odd: a write in progress
  kvtier_stats_segment out;
  EXPECT_FALSE(stats::SnapshotCopy(words.data(), &out, 50));
  words[offsetof(kvtier_stats_segment, seq) / 8] = 4;
  EXPECT_TRUE(stats::SnapshotCopy(words.data(), &out, 50));
  EXPECT_EQ(out.seq, 4u);
}

// A full /dev/shm: the segment's pages must be allocated before they are
// mapped, or the first publish dies with SIGBUS inside the engine. Needs a
// tmpfs of its own (mount: root with CAP_SYS_ADMIN, as on the CI machines).
TEST(StatsSegmentTest, AFullTmpfsRefusesTheSegmentInsteadOfKillingThePublisher) {
  TempDir dir;
  if (mount("tmpfs", dir.path().c_str(), "tmpfs", 0, "size=64k") != 0) {
    KVTIER_SKIP_WITHOUT("cannot mount a tmpfs here: " << strerror(errno));
  }
  struct Unmount {
    std::string path;
    ~Unmount() { umount2(path.c_str(), MNT_DETACH); }
  } unmount{dir.path()};
  {
    // Fill it to the last page.
    std::ofstream fill(dir.path() + "/fill", std::ios::binary);
    const std::string block(4096, 'x');
    while (fill.write(block.data(), block.size()) && fill.flush()) {
    }
  }
  // The child publishes: on the old code it would die of SIGBUS.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto seg = StatsSegment::Create(dir.path(), TestIdentity());
    if (seg.ok()) {
      Counters c;
      seg.value()->Publish(c, {});
      _exit(3);  // created and published on a full file system: not possible
    }
    const bool says_why =
        seg.status().message().find("posix_fallocate failed") != std::string::npos;
    _exit(says_why ? 0 : 4);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the publisher died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "3: created on a full tmpfs; 4: the message lacks the step";
  EXPECT_FALSE(std::ifstream(SegmentPath(dir, child)).good()) << "a refused segment leaves no file";
}

}  // namespace
}  // namespace kvtier
