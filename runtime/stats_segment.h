// StatsSegment: the writer side of the shared-memory statistics segment.
//
// Creates /dev/shm/kvtier.<pid> (mode 0600, layout include/kvtier/stats.h),
// publishes counters and region rows under the sequence lock, and removes the
// file when destroyed. A stale segment left by a process that died is removed
// by the next Create in any kvtier process and by the tools.
// Publish builds the new contents in a private copy first (reading counters
// and page tables takes time) and holds the sequence lock only while it copies
// that into shared memory, so readers rarely have to retry.
// Thread-safety: Publish has one caller at a time (the policy thread); the
// writer never waits for readers. AddEvent and SetDiskIo may be called from
// any thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvtier/stats.h"
#include "runtime/counters.h"
#include "runtime/device/device.h"
#include "runtime/mutex.h"
#include "runtime/page_table.h"
#include "runtime/status.h"

namespace kvtier {

struct StatsIdentity {
  std::string command;  // program name
  std::string backend;  // "sim", "cuda"
  std::string policy;
  std::string disk_io;  // "off" until a disk tier exists
  uint32_t page_size = 0;
};

class StatsSegment {
 public:
  // dir: where segments live ("/dev/shm" in production, a temp dir in tests).
  // Fails if this process already publishes a segment in `dir`.
  static Result<std::unique_ptr<StatsSegment>> Create(const std::string& dir,
                                                      const StatsIdentity& identity);
  ~StatsSegment();  // Close()
  // Unmaps the segment and unlinks its file (only in the process that
  // created it); Publish does nothing from then on, and AddEvent stays safe
  // from any thread. Call it where Publish is called, not beside it.
  void Close();
  StatsSegment(const StatsSegment&) = delete;
  StatsSegment& operator=(const StatsSegment&) = delete;

  void SetDiskIo(const std::string& disk_io);
  // Copies every counter, up to KVTIER_STATS_MAX_REGIONS region rows (the
  // first ones of `regions`; the rest are counted in regions_omitted) and up
  // to KVTIER_STATS_MAX_GPUS GPU rows.
  void Publish(const Counters& counters, const std::vector<RegionPtr>& regions,
               const std::vector<Device::GpuUsage>& gpus = {});
  // Records a recent event; shown by kvtier-top. Published with the next Publish.
  void AddEvent(const std::string& text);

  const std::string& path() const { return path_; }
  // Fills a region row from its page table (tier counts, heat strip). Reads
  // PageRecord::heat, so call it on the policy thread.
  static void FillRegionRow(const Region& region, kvtier_stats_region* row);
  // The 0..255 heat shown for one page: 32 * (1 + log2(heat)), piecewise
  // linear between powers of two, 0 for a page never accessed, saturating at
  // 255 from heat 128 on (a decayed count that high is "hot" whatever it is).
  static uint8_t HeatByte(uint32_t heat);

 private:
  struct PendingEvent {
    uint64_t time_ns;
    std::string text;
  };

  StatsSegment() = default;
  // Copies staging_ into the shared segment under the sequence lock.
  void WriteShared();

  std::string path_;
  pid_t owner_pid_ = 0;      // a forked child must not unlink its parent's file
  dev_t dev_ = 0;            // identity of the file we created, so the
  ino_t ino_ = 0;            // destructor never removes someone else's
  uint64_t* shm_ = nullptr;  // the mapping, touched only as atomic words; null once closed
  std::unique_ptr<kvtier_stats_segment> staging_;  // Publish's private copy
  Mutex events_mu_;
  std::vector<PendingEvent> pending_events_ GUARDED_BY(events_mu_);
  std::string disk_io_ GUARDED_BY(events_mu_);
};

}  // namespace kvtier
