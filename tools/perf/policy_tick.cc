// policy_tick: what one policy tick costs (TickEngine::Tick: the signals,
// the policy's Decide and the mover, the code the runtime's policy thread
// runs) for every policy at 512 K, 2 M and 16 M tracked 64 KiB pages, under
// pressure: the device holds a quarter of the pages at its high watermark,
// and every tick 64 pages fault back from the host (an engine touching KV
// that had left), so the policy has to make room for them.
// Prints ns per tick, ns per signal and the worst tick. The device is a
// stand-in that moves a page by changing its tier; nothing else differs
// from the runtime.
//   build/tools/perf/policy_tick [--benchmark_filter=predictive]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "policies/registry.h"
#include "runtime/clock.h"
#include "runtime/device/device.h"
#include "runtime/tick_engine.h"

namespace kvtier {
namespace {

constexpr size_t kPage = 64 << 10;
constexpr int kLayers = 32;
constexpr uint32_t kFaultsPerTick = 64;

// Moves take effect at once; residency is counted as pages change tier.
class StandInDevice final : public Device {
 public:
  const char* kind() const override { return "stand-in"; }
  Result<RegionPtr> CreateRegion(RegionId, size_t, size_t, std::string) override {
    return Status::Error("stand-in device: the benchmark makes regions");
  }
  void DestroyRegion(Region&) override {}
  Status Demote(Region& r, uint32_t p) override { return Set(r, p, Tier::kHost), Status::Ok(); }
  Status Promote(Region& r, uint32_t p) override { return Set(r, p, Tier::kDevice), Status::Ok(); }
  Status Spill(Region& r, uint32_t p) override { return Set(r, p, Tier::kDisk), Status::Ok(); }
  uint64_t resident_bytes() const override { return resident_ * kPage; }
  uint64_t capacity_bytes() const override { return capacity_ * kPage; }

  void set_capacity(uint64_t pages) { capacity_ = pages; }
  void Set(Region& r, uint32_t p, Tier to) {
    PageRecord& rec = r.pages[p];
    const Tier from = rec.tier.load(std::memory_order_relaxed);
    if (from == to) return;
    if (from == Tier::kDevice) --resident_;
    if (to == Tier::kDevice) ++resident_;
    rec.tier.store(to, std::memory_order_relaxed);
  }

 private:
  uint64_t resident_ = 0;
  uint64_t capacity_ = 0;
};

void PolicyTick(benchmark::State& state, const std::string& name) {
  const uint64_t pages = static_cast<uint64_t>(state.range(0));
  const uint32_t per_layer = static_cast<uint32_t>(pages / kLayers);
  std::vector<RegionPtr> regions;
  StandInDevice device;
  for (int l = 0; l < kLayers; ++l) {
    regions.push_back(std::make_shared<Region>(l + 1, (static_cast<uint64_t>(l) + 1) << 40,
                                               uint64_t{per_layer} * kPage, kPage, "layer"));
  }
  // A quarter of the pages fit the device; it holds them up to its high
  // watermark, the rest is on the host.
  device.set_capacity(pages / 4);
  const uint64_t resident = pages / 4 * 9 / 10;
  for (uint64_t i = 0; i < pages; ++i) {
    Region& r = *regions[i % kLayers];
    device.Set(r, static_cast<uint32_t>(i / kLayers), i < resident ? Tier::kDevice : Tier::kHost);
  }
  std::unique_ptr<Policy> policy = MakePolicy(name);
  ManualClock clock;
  TickEngineConfig config;
  TickEngine engine(device, *policy, clock, config);
  std::mt19937_64 rng(1);
  std::vector<Signal> signals;
  TierBytes usage;
  usage.host_budget = pages * kPage;
  auto tick = [&] {
    signals.clear();
    while (signals.size() < kFaultsPerTick) {
      Region& r = *regions[rng() % kLayers];
      const uint32_t p = static_cast<uint32_t>(rng() % per_layer);
      if (r.pages[p].tier.load(std::memory_order_relaxed) != Tier::kHost) continue;
      device.Set(r, p, Tier::kDevice);  // the fault brought it back
      Signal s;
      s.kind = SignalKind::kFault;
      s.region = r.id;
      s.page = p;
      s.from = Tier::kHost;
      signals.push_back(s);
    }
    clock.Advance(config.tick_ns);
    usage.host_used = (pages - device.resident_bytes() / kPage) * kPage;
    engine.Tick(signals, regions, usage);
  };
  for (int i = 0; i < 20; ++i) tick();  // the policy learns what it holds
  uint64_t ticks = 0, worst_ns = 0;
  for (auto _ : state) {
    const uint64_t t0 = MonotonicNs();
    tick();
    worst_ns = std::max(worst_ns, MonotonicNs() - t0);
    ++ticks;
  }
  state.counters["worst_tick_us"] = static_cast<double>(worst_ns) / 1e3;
  state.counters["ns_per_tick"] = benchmark::Counter(
      static_cast<double>(ticks), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["ns_per_signal"] =
      benchmark::Counter(static_cast<double>(ticks * kFaultsPerTick),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["moves_per_tick"] =
      static_cast<double>(engine.totals().moves) / static_cast<double>(engine.totals().ticks);
}

void Register() {
  for (std::string_view name : PolicyNames()) {
    benchmark::RegisterBenchmark(("policy_tick/" + std::string(name)).c_str(),
                                 [n = std::string(name)](benchmark::State& s) { PolicyTick(s, n); })
        ->Arg(512 << 10)
        ->Arg(2 << 20)
        ->Arg(16 << 20)
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
  }
}

}  // namespace
}  // namespace kvtier

int main(int argc, char** argv) {
  kvtier::Register();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
