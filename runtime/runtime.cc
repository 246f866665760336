// Runtime: its parts, allocation paths and the policy tick (see runtime.h;
// the process's instance is made in bootstrap.cc).
#include "runtime/runtime.h"

#include <dlfcn.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <system_error>

#include "runtime/clock.h"
#include "runtime/internal_thread.h"
#include "runtime/log.h"
#include "runtime/mover.h"
#include "runtime/numa_place.h"
#include "runtime/signal_apply.h"
#include "runtime/stats_segment.h"
#include "runtime/storage/env.h"
#include "runtime/storage/fault_env.h"
#include "runtime/storage/spill_store.h"
#include "runtime/tick_schedule.h"
#include "runtime/units.h"

namespace kvtier {
namespace {

constexpr size_t kSignalRingCapacity = 1 << 16;
constexpr uint64_t kPublishIntervalNs = 50'000'000;

std::string ProgramName() {
  char buf[256] = {};
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "?";
  const char* slash = strrchr(buf, '/');
  return slash ? slash + 1 : buf;
}

}  // namespace

uint64_t PhysicalMemory() {
  long pages = sysconf(_SC_PHYS_PAGES);
  long page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : 0;
}

Result<std::unique_ptr<Runtime>> Runtime::Create(const Options& options, const Parts& parts) {
  const StartStepCheck& check = parts.check_step;
  PolicySettings settings;
  settings.predict = options.predict;
  if (Status s = CheckStartStep(check, "policy"); !s.ok()) {
    return s.Annotate("KVTIER_POLICY=" + options.policy);
  }
  const std::string policy_name = options.policy == "auto" ? parts.auto_policy : options.policy;
  if (!parts.policy) return Status::Error("kvtier: no policy factory (Runtime::Parts::policy)");
  if (!parts.device) return Status::Error("kvtier: no device factory (Runtime::Parts::device)");
  std::unique_ptr<Policy> policy = parts.policy(policy_name, settings);
  if (!policy) return Status::Errorf("KVTIER_POLICY=%s: unknown policy", policy_name.c_str());
  Result<AllocationMatcher> match = AllocationMatcher::Parse(options.match);
  if (!match.ok()) return match.status().Annotate("KVTIER_MATCH=" + EchoValue(options.match));
  Result<FaultSpec> faults = ParseFaultSpec(options.disk_faults);
  if (!faults.ok()) return faults.status();

  std::unique_ptr<Runtime> rt(
      new Runtime(options, parts.clock ? *parts.clock : MonotonicClock::Get()));
  rt->policy_ = std::move(policy);
  rt->match_ = std::move(match).value();
  if (options.disk_budget == 0 && faults.value().any()) {
    Log(0, "KVTIER_DISK_FAULTS is ignored: there is no disk tier (KVTIER_DISK_BUDGET=0)");
  }
  // The disk tier, opened when the device asks for it: a CUDA backend that
  // finds no GPU never touches KVTIER_DISK_DIR.
  bool store_tried = false;
  auto open_store = [&]() -> SpillStore* {
    if (store_tried || options.disk_budget == 0) return rt->store_.get();
    store_tried = true;
    SpillStoreConfig store_config;
    store_config.dir = options.disk_dir;
    store_config.budget_bytes = options.disk_budget;
    store_config.page_size = options.page_size;
    store_config.encrypt = options.disk_encrypt;
    // options.def accepts only the words ParseCipherLib knows.
    ParseCipherLib(options.disk_cipher, &store_config.cipher);
    Env* env = nullptr;  // the default
    if (faults.value().any()) {
      // Armed once the store is open: its probes, which choose the I/O
      // mode, see the real disk, and the faults land on the I/O they test.
      rt->fault_env_ = std::make_unique<FaultEnv>(Env::Default(), rt->clock_.NowNs());
      env = rt->fault_env_.get();
      Log(0, "KVTIER_DISK_FAULTS=%s: injecting disk faults (for testing; never in production)",
          EchoValue(options.disk_faults).c_str());
    }
    const Status step = CheckStartStep(check, "disk tier");
    Result<std::unique_ptr<SpillStore>> store =
        step.ok() ? SpillStore::Create(store_config, env, &rt->counters_)
                  : Result<std::unique_ptr<SpillStore>>(step);
    if (store.ok()) {
      rt->store_ = std::move(store).value();
      if (rt->fault_env_) rt->fault_env_->Apply(faults.value());
    } else {
      // The engine keeps running; only the disk tier is lost. Pages stay in
      // device and host memory, as with KVTIER_DISK_BUDGET=0.
      Log(0, "no disk tier: KVTIER_DISK_DIR=%s: %s; pages stay in device and host memory",
          options.disk_dir.c_str(), store.status().message().c_str());
    }
    return rt->store_.get();
  };
  // kvtier's own host memory on the engine thread's node (KVTIER_NUMA_NODE);
  // the CUDA backend moves it to its GPU's once one answers.
  const Result<NumaRequest> numa = ParseNumaRequest(options.numa_node);  // checked when parsed
  SetMemoryNode(numa.ok() ? ResolveNumaNode(numa.value(), NodeOfThisThread()) : -1);
  if (Status s = CheckStartStep(check, "device"); !s.ok()) return s;
  Result<std::unique_ptr<Device>> device =
      parts.device({rt->options_, rt.get(), &rt->counters_, open_store, check});
  if (!device.ok()) return device.status();
  if (rt->store_ && !device.value()->has_disk_tier()) {
    // The backend said why, once; the policy must not plan spills.
    Counters::Set(rt->counters_.disk_budget_bytes, 0);
  }
  rt->device_ = std::move(device).value();

  TickEngineConfig tick;
  tick.tick_ns = static_cast<uint64_t>(options.tick_ms) * 1'000'000;
  tick.high_watermark = static_cast<int>(options.high_watermark);
  tick.low_watermark = static_cast<int>(options.low_watermark);
  tick.room_ahead_ns = static_cast<uint64_t>(options.room_ahead_ms) * 1'000'000;
  tick.mover.bps[kChannelUp] = static_cast<double>(options.link_bandwidth);
  tick.mover.bps[kChannelDown] = static_cast<double>(options.link_bandwidth);
  FillLinkRates(rt->device_->link_rates(), &tick.mover);
  tick.mover.share_pct = static_cast<uint32_t>(options.link_share);
  tick.mover.cap_bytes = options.move_bytes_per_tick;
  {
    // No thread ticks yet; the lock costs nothing and keeps engine_ checked.
    MutexLock lock(&rt->tick_mu_);
    rt->engine_ =
        std::make_unique<TickEngine>(*rt->device_, *rt->policy_, rt->clock_, tick, &rt->counters_);
    rt->engine_->mover().set_on_failure(
        [r = rt.get()](Region& region, const Move& move, const Status& error) {
          r->OnMoveFailed(region, move, error);
        });
  }

  Counters& c = rt->counters_;
  Counters::Set(c.device_budget_bytes, rt->device_->capacity_bytes());
  uint64_t host_budget = options.host_budget ? options.host_budget : PhysicalMemory() / 2;
  Counters::Set(c.host_budget_bytes, host_budget);
  // disk_budget_bytes is set by the store (in whole pages), if there is one.
  rt->wall_env_ = parts.wall_env ? parts.wall_env : Env::Default();
  rt->wall_root_ = parts.wall_root;
  rt->split_host_budget_ = parts.split_host_budget;
  if (parts.follow_wall) {
    // The least a backend works with: a few pages mapped, two staged.
    const uint64_t floor = WallFloor(options.page_size);
    const uint64_t reserve = options.disk_budget ? kDiskBufferReserve : 0;
    MutexLock lock(&rt->tick_mu_);
    rt->wall_budget_ = std::make_unique<WallBudget>(floor, reserve);
    rt->FollowWallLocked(rt->clock_.NowNs());
    Log(1, "automatic budget: %s", rt->wall_budget_->Why(rt->wall_).c_str());
  }

  if (options.stats) {
    const Status step = CheckStartStep(check, "stats segment");
    StatsIdentity id{ProgramName(), rt->device_->kind(), rt->policy_->name(),
                     rt->store_ ? rt->store_->io_mode() : "off",
                     static_cast<uint32_t>(options.page_size)};
    Result<std::unique_ptr<StatsSegment>> seg = step.ok()
                                                    ? StatsSegment::Create(options.stats_dir, id)
                                                    : Result<std::unique_ptr<StatsSegment>>(step);
    if (seg.ok()) {
      rt->stats_ = std::move(seg).value();
    } else {
      Log(0, "statistics segment not published: %s", seg.status().message().c_str());
    }
  }
  if (parts.start_threads) {
    Status step = CheckStartStep(check, "policy thread");
    if (step.ok()) {
      try {
        rt->policy_thread_ = std::thread([r = rt.get()] { r->PolicyLoop(); });
      } catch (const std::system_error& e) {
        step = Status::Errorf("starting the policy thread failed: %s", e.what());
      }
    }
    if (!step.ok()) return step;
  }
  Log(1, "started: backend %s, policy %s, device budget %llu bytes, page %llu bytes",
      rt->device_->kind(), rt->policy_->name(),
      static_cast<unsigned long long>(rt->device_->capacity_bytes()),
      static_cast<unsigned long long>(options.page_size));
  if (options.verbose >= 1) DumpOptions(options, stderr);
  rt->started_ = true;
  return rt;
}

Runtime::Runtime(const Options& options, const Clock& clock)
    : options_(options), clock_(clock), ring_(kSignalRingCapacity) {}

Runtime::~Runtime() {
  Shutdown();
  // A runtime whose Create failed part way is destroyed here with some of
  // its parts never made; it had no regions and no threads.
  if (!device_) return;
  for (const RegionPtr& r : regions_.Snapshot()) {
    regions_.Remove(r->base);
    device_->DestroyRegion(*r);
  }
  // The device's fault threads report to this runtime (ring_, stats_,
  // counters_) until they stop: stop them before any of that is destroyed.
  device_.reset();
}

bool Runtime::ShouldTier(size_t bytes, const void* caller, const char* api) {
  uint64_t index = alloc_index_.fetch_add(1, std::memory_order_relaxed);
  Counters::Add(counters_.allocations);
  CallSite site(caller);  // looked up only if a rule's term or the log needs it
  AllocationMatcher::Decision d = match_.Decide(bytes, index, site);
  if (options_.verbose >= 2) {
    const char* lib = site.lib().empty() ? "?" : site.lib().c_str();
    if (d.tier) {
      Log(2, "alloc #%llu via %s: %zu bytes (%s) from %s: tiered (rule %d, run %llu, nth %llu)",
          static_cast<unsigned long long>(index), api, bytes, FormatBytes(bytes).c_str(), lib,
          d.alternative + 1, static_cast<unsigned long long>(d.run),
          static_cast<unsigned long long>(d.nth));
    } else {
      Log(2, "alloc #%llu via %s: %zu bytes (%s) from %s: not matched",
          static_cast<unsigned long long>(index), api, bytes, FormatBytes(bytes).c_str(), lib);
    }
  }
  return d.tier;
}

Result<void*> Runtime::CreateRegion(size_t bytes, const void* caller) {
  uint64_t capacity = Counters::Get(counters_.device_budget_bytes) +
                      Counters::Get(counters_.host_budget_bytes) +
                      Counters::Get(counters_.disk_budget_bytes);
  uint64_t page = options_.page_size;
  uint64_t rounded = (bytes + page - 1) / page * page;
  if (Counters::Get(counters_.region_bytes) + rounded > capacity) {
    return Status::Errorf(
        "%zu more bytes would exceed what kvtier can back (%s device + host + disk); "
        "raise KVTIER_HOST_BUDGET or KVTIER_DISK_BUDGET",
        bytes, FormatBytes(capacity).c_str());
  }
  RegionId id = next_region_id_.fetch_add(1, std::memory_order_relaxed);
  std::string tag = "alloc#" + std::to_string(alloc_index_.load(std::memory_order_relaxed) - 1);
  Dl_info info{};
  if (caller && dladdr(caller, &info) && info.dli_fname) {
    const char* slash = strrchr(info.dli_fname, '/');
    tag += std::string(" ") + (slash ? slash + 1 : info.dli_fname);
  }
  Result<RegionPtr> region = device_->CreateRegion(id, bytes, page, tag);
  if (!region.ok()) return region.status();
  RegionPtr r = std::move(region).value();
  void* base = reinterpret_cast<void*>(r->base);
  regions_.Insert(std::move(r));
  Counters::Add(counters_.matched_allocations);
  Counters::Add(counters_.regions);
  Counters::Add(counters_.region_bytes, rounded);
  Log(2, "region %u: %zu bytes at %p", id, bytes, base);
  return base;
}

bool Runtime::FreeRegion(const void* ptr) {
  RegionPtr r = regions_.Remove(reinterpret_cast<uintptr_t>(ptr));
  if (!r) return false;
  uint64_t rounded = uint64_t{r->pages.size()} * r->page_size;
  device_->DestroyRegion(*r);
  Counters::Add(counters_.frees);
  Counters::Sub(counters_.regions);
  Counters::Sub(counters_.region_bytes, rounded);
  return true;
}

void Runtime::PushSignal(const Signal& signal) {
  Counters::Add(counters_.signals);
  if (!ring_.TryPush(signal)) Counters::Add(counters_.signals_dropped);
}

namespace {

// The region holding `ptr` and the pages [first, first + count) that
// [ptr, ptr+len) overlaps (count 0 for len 0).
struct PageRange {
  RegionPtr region;
  uint32_t first = 0, count = 0;
};

Result<PageRange> RangeOf(const RegionTable& regions, const void* ptr, size_t len) {
  const uintptr_t addr = reinterpret_cast<uintptr_t>(ptr);
  PageRange range;
  range.region = regions.Find(addr);
  if (!range.region) return Status::Errorf("%p is not inside a kvtier region", ptr);
  if (len == 0) return range;
  const Region& r = *range.region;
  const uintptr_t end = addr + std::min<uint64_t>(len, r.base + r.size - addr);
  range.first = r.PageOf(addr);
  range.count = r.PageOf(end - 1) - range.first + 1;
  return range;
}

}  // namespace

Status Runtime::Hint(const void* ptr, size_t len, SignalKind kind) {
  Result<PageRange> range = RangeOf(regions_, ptr, len);
  if (!range.ok()) return range.status();
  const PageRange& p = range.value();
  if (p.count == 0) return Status::Ok();
  if (kind == SignalKind::kWillNeed) {
    if (Status s = device_->SetDormant(*p.region, p.first, p.count, false); !s.ok()) return s;
  }
  PushSignal({kind, p.region->id, p.first, p.count, clock_.NowNs()});
  // The engine is about to read them: the policy starts bringing them now,
  // not at the next period.
  if (kind == SignalKind::kWillNeed) TickSoon();
  return Status::Ok();
}

Status Runtime::Dormant(const void* ptr, size_t len) {
  Result<PageRange> range = RangeOf(regions_, ptr, len);
  if (!range.ok()) return range.status();
  const PageRange& p = range.value();
  if (p.count == 0) return Status::Ok();
  if (Status s = device_->SetDormant(*p.region, p.first, p.count, true); !s.ok()) return s;
  // The policy demotes cold pages first; from the host they may go to SSD.
  PushSignal({SignalKind::kCold, p.region->id, p.first, p.count, clock_.NowNs()});
  return Status::Ok();
}

Status Runtime::Wait(const void* ptr, size_t len) {
  Result<PageRange> range = RangeOf(regions_, ptr, len);
  if (!range.ok()) return range.status();
  const PageRange& p = range.value();
  if (p.count == 0) return Status::Ok();
  if (Status s = device_->Restore(*p.region, p.first, p.count); !s.ok()) return s;
  PushSignal({SignalKind::kWillNeed, p.region->id, p.first, p.count, clock_.NowNs()});
  TickSoon();  // the policy brings them to the device now, not next period
  return Status::Ok();
}

void Runtime::TickSoon() {
  if (early_asked_.exchange(true, std::memory_order_acq_rel)) return;  // asked this tick
  MutexLock lock(&stop_mu_);
  if (!tick_early_) {
    tick_early_ = true;
    stop_cv_.Signal();
  }
}

void Runtime::OnFault(Region& region, uint32_t page, Tier from, uint64_t wait_ns) {
  Signal s{SignalKind::kFault, region.id, page, 1, clock_.NowNs()};
  s.from = from;
  PushSignal(s);
  // A page coming back from the host or disk: the engine waits on it, and
  // the policy brings the rest of its group in bulk. A first touch waits on
  // nothing the policy can speed up.
  if (from == Tier::kHost || from == Tier::kDisk) TickSoon();
}

void Runtime::OnArrivedAhead(Region& region, uint32_t first, uint32_t count, Tier from) {
  // The policy sees them used (a policy that went by faults alone would
  // find a returning session's pages cold and send them away again).
  Signal s{SignalKind::kAccess, region.id, first, count, clock_.NowNs()};
  s.from = from;
  PushSignal(s);
}

void Runtime::OnDriverEviction(Region& region, uint32_t page) {
  Signal s{SignalKind::kEvicted, region.id, page, 1, clock_.NowNs()};
  s.from = Tier::kDevice;
  PushSignal(s);
  TickSoon();
  if (stats_) {
    static std::atomic<uint64_t> reported{0};
    // One event per 64 evictions keeps the event list readable.
    if (reported.fetch_add(1, std::memory_order_relaxed) % 64 == 0) {
      const std::string where =
          "page " + std::to_string(page) + " of region " + std::to_string(region.id);
      stats_->AddEvent(device_->backend() == Backend::kHost
                           ? "unmapped " + where + " at a fault (the resident share was full)"
                           : "driver evicted " + where + " (device full at fault time)");
    }
  }
}

void Runtime::OnMoveFailed(Region& region, const Move& move, const Status& error) {
  // A region freed since this tick's snapshot refuses moves: not an error.
  if (!regions_.FindById(region.id)) return;
  static std::atomic<bool> warned{false};
  WarnOnce(
      &warned,
      "move of page %u of region %u to %s failed: %s (later failures are counted, not printed)",
      move.page, region.id, TierName(move.to), error.message().c_str());
}

WallBudget::Look Runtime::LookAtWall() {
  WallBudget::Look look;
  look.wall = ReadMemoryWall(*wall_env_, wall_root_);
  const uint64_t mapped = device_->resident_in_host_memory() ? device_->resident_bytes() : 0;
  look.tiered_in_memory = mapped + Counters::Get(counters_.host_used_bytes);
  look.own_buffers = AlignedBuffer::live_bytes();
  return look;
}

void Runtime::ApplyHostBudgetLocked(uint64_t budget) {
  HostShares shares;
  if (split_host_budget_) {
    shares = split_host_budget_(budget);
  } else {
    // The simulated GPU's device memory is host memory too: what it holds
    // now comes off the host tier's share.
    const uint64_t device = device_->resident_in_host_memory() ? device_->resident_bytes() : 0;
    shares.host = std::max(budget > device ? budget - device : 0, WallFloor(options_.page_size));
  }
  if (shares.device != 0) {
    if (!device_->SetBudget(shares.device, shares.host)) return;
    Counters::Set(counters_.device_budget_bytes, shares.device);
  }
  Counters::Set(counters_.host_budget_bytes, shares.host);
  budget_max_ = std::max(budget_max_, budget);
}

void Runtime::FollowWallLocked(uint64_t now_ns) {
  if (!wall_budget_ || now_ns < next_wall_look_ns_) return;
  next_wall_look_ns_ = now_ns + kWallLookNs;
  const uint64_t before = wall_budget_->budget();
  const WallBudget::Look look = LookAtWall();
  const uint64_t budget = wall_budget_->Next(look);
  if (!look.wall.problem.empty() && wall_.problem.empty()) {
    Log(0, "memory wall: %s; the automatic budget goes by what could be read",
        look.wall.problem.c_str());
  }
  wall_ = look.wall;
  if (wall_budget_->at_floor() && !floor_said_) {
    // A wall below the engine's own memory: kvtier keeps the least it can
    // work with and says so once; the kernel may still kill the engine.
    Log(0, "automatic budget: %s", wall_budget_->Why(wall_).c_str());
    floor_said_ = true;
  }
  Counters::Set(counters_.wall_bytes, wall_.limit);
  Counters::Set(counters_.wall_used_bytes, wall_.used);
  Counters::Set(counters_.wall_source, static_cast<uint64_t>(wall_.source));
  if (budget == before) return;
  if (before != 0 && budget < before) Counters::Add(counters_.budget_cuts);
  ApplyHostBudgetLocked(budget);
  if (before != 0) Log(2, "automatic budget: %s", wall_budget_->Why(wall_).c_str());
}

void Runtime::Tick() {
  MutexLock lock(&tick_mu_);
  const uint64_t start = clock_.NowNs();
  FollowWallLocked(start);
  std::vector<RegionPtr> regions = regions_.Snapshot();
  signals_.clear();
  Signal s;
  for (size_t n = 0; n < ring_.capacity() && ring_.TryPop(&s); ++n) signals_.push_back(s);
  TierBytes usage;
  usage.host_used = Counters::Get(counters_.host_used_bytes);
  usage.host_budget = Counters::Get(counters_.host_budget_bytes);
  usage.disk_used = Counters::Get(counters_.disk_used_bytes);
  usage.disk_budget = Counters::Get(counters_.disk_budget_bytes);
  const TickReport report = engine_->Tick(signals_, regions, usage);
  if (options_.verbose >= 3 && report.moves.moves) {
    Log(3, "tick %u: %llu moves (%llu up, %llu down, %llu spilled bytes), %llu waiting",
        report.tick, static_cast<unsigned long long>(report.moves.moves),
        static_cast<unsigned long long>(report.moves.bytes[kChannelUp]),
        static_cast<unsigned long long>(report.moves.bytes[kChannelDown]),
        static_cast<unsigned long long>(report.moves.bytes[kChannelSpill]),
        static_cast<unsigned long long>(report.moves.deferred));
  }
  Counters::Set(counters_.buffer_bytes, AlignedBuffer::live_bytes());
  if (stats_ && (start - last_publish_ns_ >= kPublishIntervalNs)) {
    // Only the first KVTIER_STATS_MAX_REGIONS get rows: list the largest.
    std::stable_sort(regions.begin(), regions.end(),
                     [](const RegionPtr& a, const RegionPtr& b) { return a->size > b->size; });
    stats_->Publish(counters_, regions, device_->gpus());
    last_publish_ns_ = start;
  }
}

uint64_t Runtime::PolicyStep(uint64_t now_ns) {
  {
    MutexLock lock(&stop_mu_);
    if (!schedule_) schedule_.emplace(static_cast<uint64_t>(options_.tick_ms) * 1'000'000, now_ns);
    if (tick_early_) {
      schedule_->AskEarly();  // kept there until a tick starts
      tick_early_ = false;
    }
    if (now_ns < schedule_->DueAt()) return schedule_->DueAt();
    early_asked_.store(false, std::memory_order_release);  // a fault from now on asks again
    schedule_->Start(now_ns);
  }
  Tick();
  MutexLock lock(&stop_mu_);
  return schedule_->DueAt();
}

void Runtime::PolicyLoop() {
  MarkKvtierThread();
  pthread_setname_np(pthread_self(), "kvtier-policy");
  // PolicyStep on the steady clock, the one the condition variable waits on.
  const auto steady_ns = [] {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::steady_clock::now().time_since_epoch())
                                     .count());
  };
  MutexLock lock(&stop_mu_);
  while (!stopping_) {
    lock.Unlock();
    const uint64_t due = PolicyStep(steady_ns());
    lock.Lock();
    // Woken by TickSoon or Shutdown, or at `due` (or spuriously): look
    // again. An early tick asked for since the look is looked at now.
    if (!stopping_ && !tick_early_ && steady_ns() < due) {
      stop_cv_.WaitUntil(stop_mu_, std::chrono::steady_clock::time_point(
                                       std::chrono::nanoseconds(static_cast<int64_t>(due))));
    }
  }
}

void Runtime::Shutdown() {
  if (shut_down_.exchange(true)) return;
  if (!started_) return;  // Create failed: nothing ran, there is nothing to report
  {
    MutexLock lock(&stop_mu_);
    stopping_ = true;
  }
  stop_cv_.SignalAll();
  if (policy_thread_.joinable()) policy_thread_.join();
  {
    MutexLock lock(&tick_mu_);
    Counters::Set(counters_.buffer_bytes, AlignedBuffer::live_bytes());
    if (stats_) stats_->Publish(counters_, regions_.Snapshot(), device_->gpus());
    // Closed, not destroyed: a fault thread may still report an event to it
    // until ~Runtime stops the device.
    if (stats_) stats_->Close();
  }
  if (options_.show_stats) {
    std::string text = SummaryText();
    fputs(text.c_str(), stderr);
    fflush(stderr);
  }
  if (options_.stats_file != "none") WriteStatsFile(options_.stats_file);
}

void Runtime::WipeKeyAtExit(int status) {
  if (store_) store_->WipeKeyAtExit(status);
}

void Runtime::WriteStatsFile(const std::string& path) {
  std::string json = "{\"pid\": " + std::to_string(getpid()) + ", \"backend\": \"" +
                     device_->kind() + "\", \"policy\": \"" + policy_->name() +
                     "\", \"page_size\": " + std::to_string(options_.page_size) +
                     ", \"counters\": {";
  const char* sep = "";
#define KVTIER_STAT(name, kind, doc)                                                            \
  json += std::string(sep) + "\"" #name "\": " + std::to_string(Counters::Get(counters_.name)); \
  sep = ", ";
#include "kvtier/stats_fields.def"
#undef KVTIER_STAT
  json += "}";
  if (fault_env_) {
    // KVTIER_DISK_FAULTS: what each kind of fault fired, every kind named.
    json += ", \"faults_injected\": {";
    for (int k = 0; k < kFaultKinds; ++k) {
      const auto f = static_cast<Fault>(k);
      json += std::string(k ? ", " : "") + "\"" + FaultName(f) +
              "\": " + std::to_string(fault_env_->injected(f));
    }
    json += "}";
  }
  json += "}\n";
  FILE* f = fopen(path.c_str(), "w");
  if (f == nullptr || fputs(json.c_str(), f) < 0 || fclose(f) != 0) {
    Log(0, "KVTIER_STATS_FILE=%s: cannot write it: %s", path.c_str(), strerror(errno));
  }
}

// How the summary says pages sit on SSD.
static const char* SealWords(const SpillStore* store) {
  return store && !store->encrypts() ? "pages in the clear (KVTIER_DISK_ENCRYPT=0)"
                                     : "pages sealed with AES-256-GCM";
}

std::string Runtime::SummaryText() {
  if (device_->backend() == Backend::kHost) return HostSummaryText();
  const Counters& c = counters_;
  auto g = [](const std::atomic<uint64_t>& v) { return Counters::Get(v); };
  auto b = [&](const std::atomic<uint64_t>& v) { return FormatBytes(g(v)); };
  char buf[4096];
  uint64_t budget = g(c.device_budget_bytes);
  uint64_t peak = g(c.device_peak_bytes);
  uint64_t faults = g(c.faults);
  int n =
      snprintf(buf, sizeof buf,
               "kvtier summary (pid %d, backend %s, policy %s, page %s)\n"
               "  tiered regions    %llu alive now (%s); %llu of %llu allocations matched; plain "
               "device memory %s\n"
               "  device residency  peak %s of %s budget (%.0f%%)%s\n"
               "  demoted           %llu pages (%s) device -> host by the policy\n"
               "  promoted          %llu pages (%s) host -> device ahead of use\n"
               "  faults            %llu pages (%s) brought back on touch, mean wait %.0f us, "
               "refaults %llu\n"
               "  driver evictions  %llu (device full at fault time)\n",
               getpid(), device_->kind(), policy_->name(), FormatBytes(options_.page_size).c_str(),
               (unsigned long long)g(c.regions), b(c.region_bytes).c_str(),
               (unsigned long long)g(c.matched_allocations), (unsigned long long)g(c.allocations),
               b(c.plain_device_bytes).c_str(), FormatBytes(peak).c_str(),
               FormatBytes(budget).c_str(), budget ? 100.0 * double(peak) / double(budget) : 0.0,
               peak <= budget ? ", never above budget" : ", ABOVE BUDGET",
               (unsigned long long)g(c.demoted_pages), b(c.demoted_bytes).c_str(),
               (unsigned long long)g(c.promoted_pages), b(c.promoted_bytes).c_str(),
               (unsigned long long)faults, b(c.fault_bytes).c_str(),
               faults ? double(g(c.fault_ns)) / double(faults) / 1000.0 : 0.0,
               (unsigned long long)g(c.refaults), (unsigned long long)g(c.driver_evictions));
  std::string out(buf, std::min<size_t>(n, sizeof buf - 1));
  if (g(c.disk_budget_bytes)) {
    snprintf(buf, sizeof buf,
             "  disk tier         spilled %llu pages (%s), restored %llu pages (%s), zero pages "
             "dropped %llu, errors %llu, checksum mismatches %llu; %s\n",
             (unsigned long long)g(c.spilled_pages), b(c.spilled_bytes).c_str(),
             (unsigned long long)g(c.restored_pages), b(c.restored_bytes).c_str(),
             (unsigned long long)g(c.zero_pages_dropped),
             (unsigned long long)g(c.spill_errors) + (unsigned long long)g(c.restore_errors),
             (unsigned long long)g(c.checksum_mismatches), SealWords(store_.get()));
    out += buf;
    out += BufferSummaryText();
    out += InjectedSummaryText();
  }
  out += WallSummaryText();
  out += PolicySummaryText();
  return out;
}

std::string Runtime::WallSummaryText() {
  MutexLock lock(&tick_mu_);
  if (!wall_budget_) return "";
  const uint64_t cuts = Counters::Get(counters_.budget_cuts);
  return "  memory wall       " + wall_budget_->Why(wall_) + "; at most " +
         FormatBytes(budget_max_) + ", cut " + std::to_string(cuts) +
         (cuts == 1 ? " time" : " times") + " to follow the wall\n";
}

std::string Runtime::BufferSummaryText() {
  // What the disk tier's I/O costs in memory, beside the budgets.
  return "  own buffers       " + FormatBytes(AlignedBuffer::live_bytes()) + " now, at most " +
         FormatBytes(AlignedBuffer::peak_bytes()) +
         " (read and bounce buffers, kept page copies; beside the budgets)\n";
}

std::string Runtime::InjectedSummaryText() const {
  if (!fault_env_) return "";
  const std::string fired = InjectedSummary(*fault_env_);
  return "  faults injected   " + (fired.empty() ? std::string("none fired") : fired) + "\n";
}

std::string Runtime::PolicySummaryText() {
  const Counters& c = counters_;
  auto g = [](const std::atomic<uint64_t>& v) { return Counters::Get(v); };
  char buf[512];
  snprintf(buf, sizeof buf,
           "  policy            %llu ticks, %.1f ms total; signals %llu (dropped %llu)\n",
           (unsigned long long)g(c.policy_ticks), double(g(c.policy_ns)) / 1e6,
           (unsigned long long)g(c.signals), (unsigned long long)g(c.signals_dropped));
  std::string out = buf;
  uint64_t room = 0;
  {
    MutexLock lock(&tick_mu_);
    room = engine_->room_ahead_bytes();
  }
  if (room != 0) {
    snprintf(buf, sizeof buf,
             "  room ahead        %s kept free for the next return once the engine is quiet "
             "(KVTIER_ROOM_AHEAD_MS)\n",
             FormatBytes(room).c_str());
    out += buf;
  }
  if (g(c.bad_frees) != 0) {
    snprintf(buf, sizeof buf, "  bad frees         %llu (unknown pointers, or freed twice)\n",
             (unsigned long long)g(c.bad_frees));
    out += buf;
  }
  return out;
}

std::string Runtime::HostSummaryText() {
  // The host backend's "device" is the engine's blocks mapped in memory, its
  // "host" tier the pages staged on their way to SSD: said so, in those words.
  const Counters& c = counters_;
  auto g = [](const std::atomic<uint64_t>& v) { return Counters::Get(v); };
  auto b = [&](const std::atomic<uint64_t>& v) { return FormatBytes(g(v)); };
  auto pages = [](uint64_t n) { return static_cast<unsigned long long>(n); };
  const uint64_t page = options_.page_size;
  const uint64_t mapped = g(c.device_budget_bytes);
  uint64_t memory = mapped + g(c.host_budget_bytes);
  const char* budget_name = "KVTIER_HOST_BUDGET";
  {
    MutexLock lock(&tick_mu_);
    if (wall_budget_) {
      // An automatic budget moves: held against the most it has been.
      memory = std::max(memory, budget_max_);
      budget_name = "the automatic budget at its most";
    }
  }
  const uint64_t resident = g(c.resident_peak_bytes);
  const uint64_t faults = g(c.faults);
  char buf[1024];
  std::string out;
  snprintf(buf, sizeof buf,
           "kvtier summary (pid %d, backend host, policy %s, page %s)\n"
           "  tiered blocks     %llu alive now (%s); %llu of %llu allocations matched\n",
           getpid(), policy_->name(), FormatBytes(page).c_str(), pages(g(c.regions)),
           b(c.region_bytes).c_str(), pages(g(c.matched_allocations)), pages(g(c.allocations)));
  out += buf;
  const std::string over = resident <= memory ? ", never above it"
                                              : ", above it by " + FormatBytes(resident - memory) +
                                                    " (pages waiting for their SSD write)";
  snprintf(buf, sizeof buf,
           "  resident memory   peak %s of %s (%s)%s; at most %s of it mapped in "
           "the blocks, the rest staged for SSD\n",
           FormatBytes(resident).c_str(), FormatBytes(memory).c_str(), budget_name, over.c_str(),
           FormatBytes(mapped).c_str());
  out += buf;
  out += WallSummaryText();
  snprintf(buf, sizeof buf,
           "  unmapped          %llu pages (%s) by the policy, %llu more when a page fault found "
           "the mapped share full\n",
           pages(g(c.demoted_pages)), b(c.demoted_bytes).c_str(), pages(g(c.driver_evictions)));
  out += buf;
  snprintf(
      buf, sizeof buf,
      "  page faults       %llu pages (%s) the engine waited for, mean %.0f us (first touches, "
      "staged pages, pages on SSD); refaults %llu; faults and installs waited for a full "
      "staging %llu times (%.1f ms in all)\n",
      pages(faults), b(c.fault_bytes).c_str(),
      faults ? double(g(c.fault_ns)) / double(faults) / 1000.0 : 0.0, pages(g(c.refaults)),
      pages(g(c.staging_waits)), double(g(c.staging_wait_ns)) / 1e6);
  out += buf;
  if (g(c.disk_budget_bytes) != 0) {
    // Pages that left memory for SSD: written at their eviction, or not
    // written at all (their copy there was current); copies written ahead
    // are writes of pages that stayed.
    const uint64_t written = g(c.spilled_pages);
    const uint64_t ahead = g(c.copied_ahead_pages);
    const uint64_t evicted_written = written > ahead ? written - ahead : 0;
    const uint64_t left = evicted_written + g(c.spill_clean_pages);
    snprintf(
        buf, sizeof buf,
        "  left memory       %llu pages (%s) for SSD: %llu written then, %llu unwritten (their "
        "copy on SSD was current); %llu pages of zeros dropped\n",
        pages(left), FormatBytes(left * page).c_str(), pages(evicted_written),
        pages(g(c.spill_clean_pages)), pages(g(c.zero_pages_dropped)));
    out += buf;
    char ratio[48] = "";
    if (left != 0)
      snprintf(ratio, sizeof ratio, ", %.2fx what left memory", double(written) / double(left));
    snprintf(buf, sizeof buf,
             "  SSD               wrote %llu pages (%s%s; %llu copies ahead of an eviction), read "
             "%llu pages (%s; %llu ahead of any touch: %llu touched since, %llu left untouched, "
             "in vain); copies kept %s; "
             "errors %llu, checksum mismatches %llu; %s\n",
             pages(written), b(c.spilled_bytes).c_str(), ratio, pages(ahead),
             pages(g(c.restored_pages)), b(c.restored_bytes).c_str(),
             pages(g(c.restored_ahead_pages)), pages(g(c.readahead_used_pages)),
             pages(g(c.readahead_vain_pages)), b(c.disk_copy_bytes).c_str(),
             pages(g(c.spill_errors) + g(c.restore_errors)), pages(g(c.checksum_mismatches)),
             SealWords(store_.get()));
    out += buf;
    out += BufferSummaryText();
    out += InjectedSummaryText();
  }
  out += PolicySummaryText();
  return out;
}

}  // namespace kvtier
