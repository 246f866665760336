// The sequence lock of the stats segment: readers copying the segment while
// the runtime's writer publishes back to back never see a torn snapshot.
// Every field is written with the same value in one publish, so a copy that
// mixes two publishes shows two values. (Copying without checking the
// sequence makes this test fail within milliseconds.)
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <latch>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "runtime/stats_segment.h"
#include "tests/tools/tool_test_util.h"
#include "tools/stats/stats_fields.h"
#include "tools/stats/stats_reader.h"

namespace kvtier {
namespace {

constexpr size_t kPage = 2u << 20;

StatsIdentity TestIdentity() {
  StatsIdentity id;
  id.command = "seqlock_test";
  id.backend = "sim";
  id.policy = "lru";
  id.disk_io = "off";
  id.page_size = kPage;
  return id;
}

// Every field of the snapshot equals the value the writer stored in all of
// them in one publish, and the region rows agree with it. A torn copy (words
// from two publishes) breaks one of these.
void ExpectConsistent(const kvtier_stats_segment& s, const std::vector<size_t>& region_pages,
                      uint64_t* value_out) {
  const uint64_t v = s.device_budget_bytes;
  for (const stats::FieldInfo& f : stats::Fields()) {
    ASSERT_EQ(f.get(s), v) << "field " << f.name << " torn at seq " << s.seq;
  }
  ASSERT_EQ(s.region_row_count, region_pages.size());
  const uint8_t tier = v % 3;
  const uint8_t heat = StatsSegment::HeatByte(static_cast<uint32_t>(v % 200));
  for (size_t i = 0; i < region_pages.size(); ++i) {
    const kvtier_stats_region& row = s.region_rows[i];
    const uint32_t n = static_cast<uint32_t>(region_pages[i]);
    ASSERT_EQ(row.pages_device, tier == 0 ? n : 0) << "v " << v;
    ASSERT_EQ(row.pages_host, tier == 1 ? n : 0) << "v " << v;
    ASSERT_EQ(row.pages_disk, tier == 2 ? n : 0) << "v " << v;
    for (int b = 0; b < KVTIER_STATS_HEAT_BUCKETS; ++b) {
      ASSERT_EQ(row.tier[b], tier) << "v " << v << " bucket " << b;
      ASSERT_EQ(row.heat[b], heat) << "v " << v << " bucket " << b;
    }
  }
  *value_out = v;
}

TEST(StatsSeqlockTest, ReadersSeeConsistentSnapshotsWhileTheWriterPublishes) {
  testing::TempDir dir;
  auto created = StatsSegment::Create(dir.path(), TestIdentity());
  ASSERT_TRUE(created.ok()) << created.status().message();
  std::unique_ptr<StatsSegment> seg = std::move(created).value();
  const std::vector<size_t> region_pages = {96, 40, 8};
  std::vector<RegionPtr> regions;
  for (size_t i = 0; i < region_pages.size(); ++i) {
    const auto id = static_cast<RegionId>(i + 1);
    regions.push_back(std::make_shared<Region>(id, 0x7f0000000000 + id * (1ull << 32),
                                               region_pages[i] * kPage, kPage, "r"));
  }
  Counters counters;
  auto set_all = [&](uint64_t v) {
#define KVTIER_STAT(name, kind, doc) Counters::Set(counters.name, v);
#include "kvtier/stats_fields.def"
#undef KVTIER_STAT
    for (const RegionPtr& r : regions) {
      for (size_t p = 0; p < r->pages.size(); ++p) {
        r->pages[p].tier.store(static_cast<Tier>(v % 3), std::memory_order_relaxed);
        r->pages[p].heat = static_cast<uint32_t>(v % 200);
      }
    }
  };
  set_all(1);
  seg->Publish(counters, regions);

  // The writer publishes back to back, far faster than a real one (once a
  // policy tick), so a reader often finds a write in progress and retries.
  // The writer goes on until every reader has checked enough snapshots.
  constexpr int kReaders = 2;
  constexpr uint64_t kMinPublishes = 5000;
  constexpr uint64_t kMaxPublishes = 5000000;  // only reached if readers starve
  constexpr uint64_t kMinSnapshots = 300;      // per reader
  constexpr uint64_t kMinChanges = 20;         // values seen change under each reader
  std::latch start(kReaders + 1);
  std::atomic<bool> done{false};
  std::atomic<uint64_t> snapshots[kReaders] = {};
  std::atomic<uint64_t> changes[kReaders] = {};
  std::vector<std::thread> readers;
  for (int t = 0; t < kReaders; ++t) {
    readers.emplace_back([&, t] {
      int fd = open(seg->path().c_str(), O_RDONLY | O_CLOEXEC);
      ASSERT_GE(fd, 0);
      void* map = mmap(nullptr, sizeof(kvtier_stats_segment), PROT_READ, MAP_SHARED, fd, 0);
      close(fd);
      ASSERT_NE(map, MAP_FAILED);
      auto snap = std::make_unique<kvtier_stats_segment>();
      uint64_t last = 0;
      start.arrive_and_wait();
      while (!done.load(std::memory_order_acquire)) {
        if (!stats::SnapshotCopy(map, snap.get())) continue;
        uint64_t v = 0;
        ExpectConsistent(*snap, region_pages, &v);
        if (::testing::Test::HasFatalFailure()) break;
        ASSERT_GE(v, last) << "snapshots went back in time";
        if (v != last) changes[t].fetch_add(1, std::memory_order_relaxed);
        last = v;
        snapshots[t].fetch_add(1, std::memory_order_relaxed);
      }
      munmap(map, sizeof(kvtier_stats_segment));
    });
  }
  start.arrive_and_wait();
  auto readers_satisfied = [&] {
    for (int t = 0; t < kReaders; ++t) {
      if (snapshots[t].load(std::memory_order_relaxed) < kMinSnapshots ||
          changes[t].load(std::memory_order_relaxed) < kMinChanges) {
        return false;
      }
    }
    return true;
  };
  uint64_t v = 1;
  while (v < kMaxPublishes && (v < kMinPublishes || !readers_satisfied()) &&
         !::testing::Test::HasFailure()) {
    set_all(++v);
    seg->Publish(counters, regions);
  }
  done.store(true, std::memory_order_release);
  for (std::thread& t : readers) t.join();

  // The checks above ran on real concurrent snapshots: the readers saw
  // the values change under them.
  for (int t = 0; t < kReaders; ++t) {
    EXPECT_GE(snapshots[t].load(), kMinSnapshots) << "reader " << t << " starved";
    EXPECT_GE(changes[t].load(), kMinChanges) << "reader " << t;
  }
  // The reader library path (open, map, copy, checks) agrees too.
  std::string error;
  auto reader = stats::SegmentDir::Open(dir.path(), &error);
  ASSERT_NE(reader, nullptr) << error;
  stats::ReadResult r = reader->Read(getpid());
  ASSERT_EQ(r.state, stats::ReadState::kOk) << r.message;
  uint64_t last = 0;
  ExpectConsistent(*r.snapshot, region_pages, &last);
  EXPECT_EQ(last, v);
}

}  // namespace
}  // namespace kvtier
