// policy_tick: what one policy tick costs (TickEngine::Tick: the signals,
// the policy's Decide and the mover, the code the runtime's policy thread
// runs) for every policy at 512 K, 2 M and 16 M tracked 64 KiB pages, under
// pressure: the device holds a quarter of the pages at its high watermark,
// and every tick 64 pages fault back from the host (an engine touching KV
// that had left), so the policy has to make room for them.
// Prints ns per tick, ns per signal and the worst tick. The device is the
// tests' InstantDevice (tests/testing/instant_device.h), which moves a page
// by changing its tier; nothing else differs from the runtime.
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
#include "tests/testing/instant_device.h"

namespace kvtier {
namespace {

constexpr size_t kPage = 64 << 10;
constexpr int kLayers = 32;
constexpr uint32_t kFaultsPerTick = 64;

void PolicyTick(benchmark::State& state, const std::string& name) {
  const uint64_t pages = static_cast<uint64_t>(state.range(0));
  const uint32_t per_layer = static_cast<uint32_t>(pages / kLayers);
  std::vector<RegionPtr> regions;
  testing::InstantDevice device(kPage);  // residency counted as tiers change
  device.keep_log = false;
  for (int l = 0; l < kLayers; ++l) {
    regions.push_back(std::make_shared<Region>(l + 1, (static_cast<uint64_t>(l) + 1) << 40,
                                               uint64_t{per_layer} * kPage, kPage, "layer"));
  }
  // A quarter of the pages fit the device; it holds them up to its high
  // watermark, the rest is on the host.
  device.set_capacity(pages / 4 * kPage);
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
