// Runtime: lifecycle, allocation paths and the policy tick (see runtime.h).
#include "runtime/runtime.h"

#include <dlfcn.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <unordered_map>

#include "runtime/device/sim/sim_device.h"
#ifdef KVTIER_HAVE_CUDA
#include "runtime/device/cuda/cuda_device.h"
#endif
#include "runtime/log.h"
#include "runtime/mover.h"
#include "runtime/signal_apply.h"
#include "runtime/stats_segment.h"
#include "runtime/storage/spill_store.h"

namespace kvtier {
namespace {

constexpr size_t kSignalRingCapacity = 1 << 16;
constexpr uint64_t kPublishIntervalNs = 50'000'000;

uint64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string ProgramName() {
  char buf[256] = {};
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "?";
  const char* slash = strrchr(buf, '/');
  return slash ? slash + 1 : buf;
}

uint64_t PhysicalMemory() {
  long pages = sysconf(_SC_PHYS_PAGES);
  long page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : 0;
}

// Process-wide instance. Not destroyed at exit: engine threads and static
// destructors may still touch tiered memory, so the fault handlers must live
// until the process is gone. A fork child starts without one.
std::mutex g_init_mu;
std::atomic<Runtime*> g_runtime{nullptr};
std::atomic<bool> g_init_done{false};

void ShutdownAtExit() {
  if (Runtime* rt = g_runtime.load(std::memory_order_acquire)) rt->Shutdown();
}

void ResetInChild() {
  // The parent's threads do not exist here and its userfaultfd registrations
  // were dropped by fork; the child builds its own runtime if it uses CUDA.
  // The parent's instance is leaked: a parent thread may have held one of its
  // locks at fork time.
  if (Runtime* parent = g_runtime.load(std::memory_order_relaxed)) parent->device().AfterForkInChild();
  g_runtime.store(nullptr, std::memory_order_relaxed);
  g_init_done.store(false, std::memory_order_relaxed);
  new (&g_init_mu) std::mutex();
}

}  // namespace

const Options& Runtime::ProcessOptions() {
  static const Options options = [] {
    Result<Options> parsed = ParseOptions(ProcessEnv());
    Status status = parsed.status();
    if (status.ok()) {
      Result<AllocationMatcher> match = AllocationMatcher::Parse(parsed.value().match);
      if (!match.ok()) status = Status::Error("KVTIER_MATCH=" + parsed.value().match + ": " + match.status().message());
    }
    if (!status.ok()) {
      // A configuration error stops the process at start: one line, exit 2.
      Log(0, "%s", status.message().c_str());
      _exit(2);
    }
    g_log_level.store(static_cast<int>(parsed.value().verbose), std::memory_order_relaxed);
    pthread_atfork(nullptr, nullptr, ResetInChild);
    return std::move(parsed).value();
  }();
  return options;
}

Runtime* Runtime::Get() {
  if (g_init_done.load(std::memory_order_acquire)) return g_runtime.load(std::memory_order_acquire);
  std::lock_guard<std::mutex> lock(g_init_mu);
  if (g_init_done.load(std::memory_order_relaxed)) return g_runtime.load(std::memory_order_relaxed);
  const Options& options = ProcessOptions();
  Runtime* rt = nullptr;
  if (options.backend == "sim") {
    Options effective = options;
    if (effective.device_budget == 0) effective.device_budget = effective.sim_device_memory / 10 * 9;
    auto created = Create(effective, nullptr, /*start_threads=*/true);
    if (created.ok()) {
      rt = created.value().release();
    } else {
      Log(0, "cannot start the simulated GPU: %s; running without kvtier",
          created.status().message().c_str());
    }
  } else if (options.backend != "off") {
#ifdef KVTIER_HAVE_CUDA
    auto created = Create(
        options,
        [&options](DeviceEvents* events, Counters* counters) {
          return MakeCudaDevice(options, events, counters);
        },
        /*start_threads=*/true);
    if (created.ok()) {
      rt = created.value().release();
      if (options.disk_budget > 0) {
        Log(0, "KVTIER_DISK_BUDGET=%s is ignored: the CUDA backend has no disk tier yet (pages "
            "stay in device and host memory; the simulated GPU has one)",
            FormatBytes(options.disk_budget).c_str());
      }
    } else {
      // No usable GPU: every call passes through, and the program sees the
      // CUDA runtime's own error codes.
      Log(1, "KVTIER_BACKEND=%s: %s; passing every call through", options.backend.c_str(),
          created.status().message().c_str());
    }
#else
    Log(1, "KVTIER_BACKEND=%s: this build has no CUDA backend; passing every call through",
        options.backend.c_str());
#endif
  }
  g_runtime.store(rt, std::memory_order_release);
  g_init_done.store(true, std::memory_order_release);
  if (rt) atexit(ShutdownAtExit);
  return rt;
}

Result<std::unique_ptr<Runtime>> Runtime::Create(const Options& options,
                                                 const DeviceFactory& make_device,
                                                 bool start_threads) {
  auto policy = MakePolicy(options.policy, options.move_bytes_per_tick);
  if (!policy) return Status::Errorf("KVTIER_POLICY=%s: unknown policy", options.policy.c_str());
  Result<AllocationMatcher> match = AllocationMatcher::Parse(options.match);
  if (!match.ok()) return match.status().Annotate("KVTIER_MATCH=" + options.match);

  std::unique_ptr<Runtime> rt(new Runtime(options, nullptr));
  rt->policy_ = std::move(policy);
  rt->match_ = std::move(match).value();
  std::unique_ptr<Device> device;
  if (make_device) {
    auto made = make_device(rt.get(), &rt->counters_);
    if (!made.ok()) return made.status();
    device = std::move(made).value();
  } else {
    if (options.disk_budget > 0) {
      SpillStoreConfig store_config;
      store_config.dir = options.disk_dir;
      store_config.budget_bytes = options.disk_budget;
      store_config.page_size = options.page_size;
      auto store = SpillStore::Create(store_config, nullptr, &rt->counters_);
      if (!store.ok()) return store.status().Annotate("KVTIER_DISK_DIR=" + options.disk_dir);
      rt->store_ = std::move(store).value();
    }
    SimDeviceConfig config;
    config.store = rt->store_.get();
    config.capacity_bytes = options.device_budget;
    config.fault_threads = static_cast<int>(options.sim_fault_threads);
    config.events = rt.get();
    config.counters = &rt->counters_;
    auto sim = SimDevice::Create(config);
    if (!sim.ok()) return sim.status();
    device = std::move(sim).value();
  }
  rt->device_ = std::move(device);

  Counters& c = rt->counters_;
  Counters::Set(c.device_budget_bytes, rt->device_->capacity_bytes());
  uint64_t host_budget = options.host_budget ? options.host_budget : PhysicalMemory() / 2;
  Counters::Set(c.host_budget_bytes, host_budget);
  // disk_budget_bytes is set by the store (in whole pages), if there is one.

  if (options.stats) {
    StatsIdentity id{ProgramName(), rt->device_->kind(), rt->policy_->name(),
                     rt->store_ ? rt->store_->io_mode() : "off",
                     static_cast<uint32_t>(options.page_size)};
    auto seg = StatsSegment::Create(options.stats_dir, id);
    if (seg.ok()) {
      rt->stats_ = std::move(seg).value();
    } else {
      Log(0, "statistics segment not published: %s", seg.status().message().c_str());
    }
  }
  Log(1, "started: backend %s, policy %s, device budget %llu bytes, page %llu bytes",
      rt->device_->kind(), rt->policy_->name(),
      static_cast<unsigned long long>(rt->device_->capacity_bytes()),
      static_cast<unsigned long long>(options.page_size));
  if (options.verbose >= 1) DumpOptions(options, stderr);
  if (start_threads) rt->policy_thread_ = std::thread([r = rt.get()] { r->PolicyLoop(); });
  return rt;
}

Runtime::Runtime(const Options& options, std::unique_ptr<Device> device)
    : options_(options), device_(std::move(device)), ring_(kSignalRingCapacity) {}

Runtime::~Runtime() {
  Shutdown();
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
  std::string lib;
  if (match_.needs_caller() || options_.verbose >= 2) {
    Dl_info info{};
    if (caller && dladdr(caller, &info) && info.dli_fname) lib = info.dli_fname;
  }
  AllocationMatcher::Decision d = match_.Decide(bytes, index, lib);
  if (d.tier) {
    Log(2, "alloc #%llu via %s: %zu bytes (%s) from %s: tiered (rule %d, run %llu, nth %llu)",
        static_cast<unsigned long long>(index), api, bytes, FormatBytes(bytes).c_str(),
        lib.empty() ? "?" : lib.c_str(), d.alternative + 1,
        static_cast<unsigned long long>(d.run), static_cast<unsigned long long>(d.nth));
  } else {
    Log(2, "alloc #%llu via %s: %zu bytes (%s) from %s: not matched",
        static_cast<unsigned long long>(index), api, bytes, FormatBytes(bytes).c_str(),
        lib.empty() ? "?" : lib.c_str());
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
    return Status::Errorf("%zu more bytes would exceed what kvtier can back (%s device + host + disk); "
                          "raise KVTIER_HOST_BUDGET or KVTIER_DISK_BUDGET", bytes,
                          FormatBytes(capacity).c_str());
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

Status Runtime::Hint(const void* ptr, size_t len, SignalKind kind) {
  uintptr_t addr = reinterpret_cast<uintptr_t>(ptr);
  RegionPtr r = regions_.Find(addr);
  if (!r) return Status::Errorf("hint for %p: not inside a kvtier region", ptr);
  if (len == 0) return Status::Ok();
  uintptr_t end = std::min<uintptr_t>(addr + len, r->base + r->size);
  uint32_t first = r->PageOf(addr);
  uint32_t last = r->PageOf(end - 1);
  PushSignal({kind, r->id, first, last - first + 1, NowNs()});
  return Status::Ok();
}

void Runtime::OnFault(Region& region, uint32_t page, Tier from, uint64_t wait_ns) {
  Signal s{SignalKind::kFault, region.id, page, 1, NowNs()};
  s.from = from;
  PushSignal(s);
}

void Runtime::OnDriverEviction(Region& region, uint32_t page) {
  if (stats_) {
    static std::atomic<uint64_t> reported{0};
    // One event per 64 evictions keeps the event list readable.
    if (reported.fetch_add(1, std::memory_order_relaxed) % 64 == 0) {
      stats_->AddEvent("driver evicted page " + std::to_string(page) + " of region " +
                       std::to_string(region.id) + " (device full at fault time)");
    }
  }
}

void Runtime::ExecuteMoves(const Decisions& d, const std::vector<RegionPtr>& regions) {
  std::unordered_map<RegionId, Region*> by_id;
  for (const RegionPtr& r : regions) by_id[r->id] = r.get();
  auto find = [&](RegionId id) {
    auto it = by_id.find(id);
    return it == by_id.end() ? nullptr : it->second;
  };
  uint64_t cap = options_.move_bytes_per_tick;
  uint64_t moved = 0;
  // Moves stop after two tick periods of work, whatever the byte cap: a tick
  // that spills for a second would leave faults and pressure unseen that
  // long. The policy decides again next tick from fresh state.
  const uint64_t deadline = NowNs() + 2 * static_cast<uint64_t>(options_.tick_ms) * 1'000'000;
  auto account = [&](Region& r, const Move& m, Tier from, MoveOutcome outcome, const Status& st) {
    if (outcome == MoveOutcome::kAlreadyThere) return;
    if (outcome == MoveOutcome::kFailed) {
      // A region freed since this tick's snapshot refuses moves: not an error.
      if (!regions_.FindById(r.id)) return;
      static std::atomic<bool> warned{false};
      WarnOnce(&warned, "move of page %u of region %u to %s failed: %s (later failures are counted, not printed)",
               m.page, r.id, TierName(m.to), st.message().c_str());
      return;
    }
    moved += r.page_size;
    Log(3, "moved page %u of region %u %s -> %s", m.page, r.id, TierName(from), TierName(m.to));
  };
  auto tier_of = [](const Region& r, const Move& m) {
    return m.page < r.pages.size() ? r.pages[m.page].tier.load(std::memory_order_relaxed) : m.to;
  };
  size_t i = 0;
  while (i < d.moves.size() && !(cap && moved >= cap) && NowNs() <= deadline) {
    const Move& m = d.moves[i];
    if (m.to != Tier::kDisk) {
      ++i;
      Region* r = find(m.region);
      if (r == nullptr) continue;
      Tier from = tier_of(*r, m);
      Status st;
      MoveOutcome outcome = MovePage(*device_, *r, m, tick_, &st);
      account(*r, m, from, outcome, st);
      continue;
    }
    // A run of spills goes to the device as one group, so their writes are
    // in flight together; the group stays within the byte cap and, once the
    // disk's speed is known, within what fits before the deadline.
    size_t most = kSpillGroupPages;
    if (spill_ns_per_byte_ > 0) {
      Region* first = find(m.region);
      const double page_ns = spill_ns_per_byte_ * static_cast<double>(first ? first->page_size : 1);
      const double left_ns = static_cast<double>(deadline - std::min(deadline, NowNs()));
      most = std::clamp<size_t>(static_cast<size_t>(left_ns / page_ns), 1, kSpillGroupPages);
    }
    std::vector<const Move*> group;
    std::vector<PageRef> refs;
    std::vector<Tier> from;
    uint64_t group_bytes = 0;
    for (; i < d.moves.size() && d.moves[i].to == Tier::kDisk && refs.size() < most; ++i) {
      if (cap && moved + group_bytes >= cap) break;
      Region* r = find(d.moves[i].region);
      if (r == nullptr) continue;
      group.push_back(&d.moves[i]);
      refs.push_back({r, d.moves[i].page});
      from.push_back(tier_of(*r, d.moves[i]));
      group_bytes += r->page_size;
    }
    std::vector<MoveOutcome> outcomes(refs.size());
    std::vector<Status> errors(refs.size());
    const uint64_t started = NowNs();
    SpillPages(*device_, refs, tick_, outcomes, errors);
    uint64_t spilled = 0;
    for (size_t j = 0; j < refs.size(); ++j) {
      if (outcomes[j] == MoveOutcome::kMoved) spilled += refs[j].region->page_size;
    }
    if (spilled > 0) {
      const double per_byte = static_cast<double>(NowNs() - started) / static_cast<double>(spilled);
      spill_ns_per_byte_ =
          spill_ns_per_byte_ > 0 ? 0.5 * spill_ns_per_byte_ + 0.5 * per_byte : per_byte;
    }
    for (size_t j = 0; j < refs.size(); ++j) {
      account(*refs[j].region, *group[j], from[j], outcomes[j], errors[j]);
    }
  }
}

void Runtime::Tick() {
  std::lock_guard<std::mutex> lock(tick_mu_);
  uint64_t start = NowNs();
  ++tick_;
  std::vector<RegionPtr> regions = regions_.Snapshot();
  std::unordered_map<RegionId, Region*> by_id;
  for (const RegionPtr& r : regions) by_id[r->id] = r.get();

  Signal s;
  for (size_t n = 0; n < ring_.capacity() && ring_.TryPop(&s); ++n) {
    auto it = by_id.find(s.region);
    if (it == by_id.end()) continue;  // the region was freed since
    SignalEffects effects;
    ApplySignal(*it->second, s, tick_, &effects);
    if (effects.refaults) Counters::Add(counters_.refaults, effects.refaults);
    policy_->OnSignal(s, *it->second);
  }

  PolicyView view;
  view.now = tick_;
  view.regions = &regions;
  auto usage = [&](uint64_t used, uint64_t budget) {
    return TierUsage::Of(used, budget, static_cast<uint64_t>(options_.high_watermark),
                         static_cast<uint64_t>(options_.low_watermark));
  };
  view.tier[0] = usage(device_->resident_bytes(), device_->capacity_bytes());
  view.tier[1] = usage(Counters::Get(counters_.host_used_bytes), Counters::Get(counters_.host_budget_bytes));
  view.tier[2] = usage(Counters::Get(counters_.disk_used_bytes), Counters::Get(counters_.disk_budget_bytes));
  Decisions decisions;
  policy_->Decide(view, &decisions);
  ExecuteMoves(decisions, regions);

  Counters::Add(counters_.policy_ticks);
  Counters::Add(counters_.policy_ns, NowNs() - start);
  if (stats_ && (start - last_publish_ns_ >= kPublishIntervalNs)) {
    // Only the first KVTIER_STATS_MAX_REGIONS get rows: list the largest.
    std::stable_sort(regions.begin(), regions.end(),
                     [](const RegionPtr& a, const RegionPtr& b) { return a->size > b->size; });
    stats_->Publish(counters_, regions);
    last_publish_ns_ = start;
  }
}

void Runtime::PolicyLoop() {
  pthread_setname_np(pthread_self(), "kvtier-policy");
  std::unique_lock<std::mutex> lock(stop_mu_);
  auto period = std::chrono::milliseconds(options_.tick_ms);
  while (!stopping_) {
    stop_cv_.wait_for(lock, period, [this] { return stopping_; });
    if (stopping_) break;
    lock.unlock();
    Tick();
    lock.lock();
  }
}

void Runtime::Shutdown() {
  if (shut_down_.exchange(true)) return;
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (policy_thread_.joinable()) policy_thread_.join();
  {
    std::lock_guard<std::mutex> lock(tick_mu_);
    if (stats_) stats_->Publish(counters_, regions_.Snapshot());
  }
  if (options_.show_stats) {
    std::string text = SummaryText();
    fputs(text.c_str(), stderr);
    fflush(stderr);
  }
  stats_.reset();
}

std::string Runtime::SummaryText() {
  const Counters& c = counters_;
  auto g = [](const std::atomic<uint64_t>& v) { return Counters::Get(v); };
  auto b = [&](const std::atomic<uint64_t>& v) { return FormatBytes(g(v)); };
  char buf[4096];
  uint64_t budget = g(c.device_budget_bytes);
  uint64_t peak = g(c.device_peak_bytes);
  uint64_t faults = g(c.faults);
  int n = snprintf(
      buf, sizeof buf,
      "kvtier summary (pid %d, backend %s, policy %s, page %s)\n"
      "  tiered regions    %llu alive now (%s); %llu of %llu allocations matched; plain device memory %s\n"
      "  device residency  peak %s of %s budget (%.0f%%)%s\n"
      "  demoted           %llu pages (%s) device -> host by the policy\n"
      "  promoted          %llu pages (%s) host -> device ahead of use\n"
      "  faults            %llu pages (%s) brought back on touch, mean wait %.0f us, refaults %llu\n"
      "  driver evictions  %llu (device full at fault time)\n",
      getpid(), device_->kind(), policy_->name(), FormatBytes(options_.page_size).c_str(),
      (unsigned long long)g(c.regions), b(c.region_bytes).c_str(),
      (unsigned long long)g(c.matched_allocations), (unsigned long long)g(c.allocations),
      b(c.plain_device_bytes).c_str(), FormatBytes(peak).c_str(), FormatBytes(budget).c_str(),
      budget ? 100.0 * double(peak) / double(budget) : 0.0,
      peak <= budget ? ", never above budget" : ", ABOVE BUDGET",
      (unsigned long long)g(c.demoted_pages), b(c.demoted_bytes).c_str(),
      (unsigned long long)g(c.promoted_pages), b(c.promoted_bytes).c_str(),
      (unsigned long long)faults, b(c.fault_bytes).c_str(),
      faults ? double(g(c.fault_ns)) / double(faults) / 1000.0 : 0.0,
      (unsigned long long)g(c.refaults), (unsigned long long)g(c.driver_evictions));
  std::string out(buf, std::min<size_t>(n, sizeof buf - 1));
  if (g(c.disk_budget_bytes)) {
    snprintf(buf, sizeof buf,
             "  disk tier         spilled %llu pages (%s), restored %llu pages (%s), errors %llu, "
             "checksum mismatches %llu\n",
             (unsigned long long)g(c.spilled_pages), b(c.spilled_bytes).c_str(),
             (unsigned long long)g(c.restored_pages), b(c.restored_bytes).c_str(),
             (unsigned long long)(g(c.spill_errors) + g(c.restore_errors)),
             (unsigned long long)g(c.checksum_mismatches));
    out += buf;
  }
  snprintf(buf, sizeof buf, "  policy            %llu ticks, %.1f ms total; signals %llu (dropped %llu)\n",
           (unsigned long long)g(c.policy_ticks), double(g(c.policy_ns)) / 1e6,
           (unsigned long long)g(c.signals), (unsigned long long)g(c.signals_dropped));
  out += buf;
  return out;
}

}  // namespace kvtier
