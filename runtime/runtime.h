// Runtime: the one kvtier instance of a process.
//
// Owns the options, the device backend, the region table, the signal ring,
// the policy thread and the stats segment. The process's one instance is made
// lazily on the first hooked call, above the runtime (start/process.h: the
// composition root, which builds the parts); tests build their own with
// Create, on the parts they choose, and drive ticks by hand. Data flows one way: hooks create and
// free regions; signals flow into the policy; the policy emits moves; the mover executes them
// through the device; stats flow out to shared memory. Thread-safety: every public method is safe
// from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "runtime/allocation_matcher.h"
#include "runtime/clock.h"
#include "runtime/counters.h"
#include "runtime/device/device.h"
#include "runtime/memory_wall.h"
#include "runtime/mutex.h"
#include "runtime/options.h"
#include "runtime/page_table.h"
#include "runtime/policy.h"
#include "runtime/region_table.h"
#include "runtime/signal_ring.h"
#include "runtime/start_step.h"
#include "runtime/tick_engine.h"
#include "runtime/tick_schedule.h"

namespace kvtier {

class StatsSegment;
class Env;
class FaultEnv;
class SpillStore;

// Bytes of physical memory (0 if unknown): what automatic host budgets halve.
uint64_t PhysicalMemory();

class Runtime : public DeviceEvents {
 public:
  // Opens the disk tier on its first call (later calls return the same):
  // null when KVTIER_DISK_BUDGET=0 or the store could not open (one
  // warning). A device that has found its GPU calls it.
  using StoreOpener = std::function<SpillStore*()>;
  // What a device is made with: the runtime's options, event sink and
  // counters, the disk tier's opener, and the start-up test seam.
  struct DeviceContext {
    const Options& options;
    DeviceEvents* events;
    Counters* counters;
    StoreOpener open_store;
    StartStepCheck check_step;
  };
  // Makes the device backend.
  using DeviceFactory = std::function<Result<std::unique_ptr<Device>>(const DeviceContext& ctx)>;
  // Makes the policy KVTIER_POLICY names; nullptr for a name it does not know.
  using PolicyFactory =
      std::function<std::unique_ptr<Policy>(std::string_view name, const PolicySettings& settings)>;
  // What a runtime is built from. The factories are required: the runtime
  // knows devices and policies only through them. The process's start-up
  // (bootstrap.h) makes them for the backend KVTIER_BACKEND names; tests
  // make the same (SimParts) or their own.
  struct Parts {
    DeviceFactory device;
    PolicyFactory policy;
    // The policy KVTIER_POLICY=auto (the default) stands for.
    std::string auto_policy = "predictive";
    // Where signals are stamped and ticks read time; null: the monotonic
    // clock. Must outlive the runtime. The policy thread's period is wall
    // time whatever the clock.
    const Clock* clock = nullptr;
    // False leaves the policy thread out, for tests that drive Tick() or
    // PolicyStep() by hand.
    bool start_threads = true;
    // A test seam: asked before each fallible step of start-up (start_step.h).
    StartStepCheck check_step;
    // KVTIER_HOST_BUDGET unset: the host memory budget follows the memory
    // wall (runtime/memory_wall.h), looked at every kWallLookNs; the
    // process's start-up sets it. False: the budget is fixed.
    bool follow_wall = false;
    // Where the wall's files are read: null is Env::Default(), a root of ""
    // the live system (tests: a fake tree). Must outlive the runtime.
    Env* wall_env = nullptr;
    std::string wall_root;
    // How a host memory budget divides on the device: the host backend's
    // mapped share and staging (bootstrap.h). Null: all of it is the host
    // tier, less the device's capacity where the device is host memory
    // (the simulated GPU).
    std::function<HostShares(uint64_t budget)> split_host_budget;
  };
  // Builds a runtime from `parts`. Fails when the policy, the device or the
  // policy thread cannot be made; a disk tier or stats segment that cannot be
  // made costs only that part (one warning).
  static Result<std::unique_ptr<Runtime>> Create(const Options& options, const Parts& parts);
  ~Runtime() override;
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  const Options& options() const { return options_; }
  Device& device() { return *device_; }
  Counters& counters() { return counters_; }
  const RegionTable& regions() const { return regions_; }
  // The disk tier; null without one.
  const SpillStore* store() const { return store_.get(); }

  // Decides whether an allocation of `bytes` from `caller` (a return address)
  // through `api` (the hooked function's name) becomes a tiered region.
  // Counts the allocation; KVTIER_VERBOSE=2 logs the decision.
  bool ShouldTier(size_t bytes, const void* caller, const char* api = "cudaMalloc");
  // Creates a tiered region; returns its base address.
  Result<void*> CreateRegion(size_t bytes, const void* caller);
  // Frees the region that starts at `ptr`; false if there is none.
  bool FreeRegion(const void* ptr);

  // Queues access evidence for the policy; counts a drop when the ring is full.
  void PushSignal(const Signal& signal);
  // Hint API (kvtier.h): applies to every page overlapping [ptr, ptr+len).
  // kWillNeed also wakes dormant pages.
  Status Hint(const void* ptr, size_t len, SignalKind kind);
  // KVTIER_HINT_DORMANT: the engine will not touch the pages until it wakes
  // them; they are demoted first and may go to SSD on any backend.
  Status Dormant(const void* ptr, size_t len);
  // kvtier_wait: wakes the pages and returns once none is on SSD.
  Status Wait(const void* ptr, size_t len);

  // One policy tick: drain signals, decide, move, publish stats.
  void Tick();
  // One look of the policy thread at `now_ns`: ticks when one is due
  // (TickSchedule: a period after the last periodic one, or early once an
  // event asked for it) and returns when the next one is due. The first
  // look starts the schedule. The policy thread looks on the steady clock;
  // a test that starts no threads (Parts::start_threads) looks at times of
  // its own. One caller at a time.
  uint64_t PolicyStep(uint64_t now_ns);
  // Stops the policy thread, publishes the final stats, prints them when
  // KVTIER_SHOW_STATS=1, removes the stats segment. Idempotent.
  void Shutdown();
  // At the process's exit, after Shutdown: wipes the spill key (see
  // SpillStore::WipeKeyAtExit); `status` is the status the process exits with.
  void WipeKeyAtExit(int status);
  // Formats the statistics a person reads at exit (KVTIER_SHOW_STATS=1).
  std::string SummaryText();
  // Writes every counter as one JSON object (KVTIER_STATS_FILE).
  void WriteStatsFile(const std::string& path);

  // DeviceEvents
  void OnFault(Region& region, uint32_t page, Tier from, uint64_t wait_ns) override;
  void OnDriverEviction(Region& region, uint32_t page) override;
  void OnArrivedAhead(Region& region, uint32_t first, uint32_t count, Tier from) override;

 private:
  Runtime(const Options& options, const Clock& clock);
  void PolicyLoop();
  // SummaryText's host backend form, and its policy lines.
  std::string HostSummaryText();
  std::string PolicySummaryText();
  // The faults KVTIER_DISK_FAULTS fired, as a summary line ("" without it).
  std::string InjectedSummaryText() const;
  // kvtier's own buffers (AlignedBuffer::live_bytes and its peak), a line.
  static std::string BufferSummaryText();
  // Logs a move the device refused (the first one; later ones are counted).
  void OnMoveFailed(Region& region, const Move& move, const Status& error);

  const Options options_;
  const Clock& clock_;
  Counters counters_;
  std::unique_ptr<FaultEnv> fault_env_;  // KVTIER_DISK_FAULTS; null without; outlives store_
  std::unique_ptr<SpillStore> store_;    // the disk tier; null when KVTIER_DISK_BUDGET=0
  std::unique_ptr<Device> device_;       // reset first in ~Runtime; before store_ in any case
  RegionTable regions_;
  SignalRing ring_;
  AllocationMatcher match_;
  std::unique_ptr<Policy> policy_;
  std::unique_ptr<StatsSegment> stats_;
  std::unique_ptr<TickEngine> engine_ PT_GUARDED_BY(tick_mu_);
  std::vector<Signal> signals_ GUARDED_BY(tick_mu_);  // this tick's, drained from ring_
  std::atomic<uint32_t> next_region_id_{1};
  std::atomic<uint64_t> alloc_index_{0};
  uint64_t last_publish_ns_ GUARDED_BY(tick_mu_) = 0;

  // The automatic budget (Parts::follow_wall): null while fixed.
  // FollowWallLocked looks at the wall when due and hands a changed budget
  // to the device and the counters.
  void FollowWallLocked(uint64_t now_ns) REQUIRES(tick_mu_);
  void ApplyHostBudgetLocked(uint64_t budget) REQUIRES(tick_mu_);
  WallBudget::Look LookAtWall();
  std::string WallSummaryText();
  Env* wall_env_ = nullptr;
  std::string wall_root_;
  std::function<HostShares(uint64_t budget)> split_host_budget_;
  std::unique_ptr<WallBudget> wall_budget_ GUARDED_BY(tick_mu_);
  WallReading wall_ GUARDED_BY(tick_mu_);
  uint64_t next_wall_look_ns_ GUARDED_BY(tick_mu_) = 0;
  uint64_t budget_max_ GUARDED_BY(tick_mu_) = 0;  // the most the automatic budget has been
  bool floor_said_ GUARDED_BY(tick_mu_) = false;  // the wall left only the floor: said once

  // Lock order: tick_mu_ before the device's and the store's locks (a tick
  // moves pages); stop_mu_ is never held with another.
  Mutex tick_mu_;  // serialises Tick() (thread vs tests vs shutdown)
  Mutex stop_mu_;
  CondVar stop_cv_;
  bool stopping_ GUARDED_BY(stop_mu_) = false;
  // Wakes the policy thread for a tick before its period (see PolicyLoop).
  void TickSoon();
  // The engine waits on a page from the host or disk, or the device evicted
  // a page itself (it was full at a fault): the policy ticks now rather than
  // at its next period. early_asked_ lets a burst of faults take stop_mu_
  // once per tick.
  bool tick_early_ GUARDED_BY(stop_mu_) = false;
  std::optional<TickSchedule> schedule_ GUARDED_BY(stop_mu_);  // from the first PolicyStep
  std::atomic<bool> early_asked_{false};
  std::atomic<bool> shut_down_{false};
  bool started_ = false;  // set as Create's last step: every part exists
  std::thread policy_thread_;
};

}  // namespace kvtier
