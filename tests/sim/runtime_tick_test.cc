// The runtime's policy thread on the simulated GPU: it ticks on its period,
// and at once when the device had to evict a page itself (it was full at a
// fault), so the policy makes room before the next fault waits on an
// eviction too, and when the engine waits on a page from the host, so the
// rest of its group comes back in bulk, and when it hints that it will need
// a range (WILL_NEED). Signals carry the time of the clock
// the runtime was given.
#include <chrono>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "runtime/clock.h"
#include "runtime/options.h"
#include "runtime/policy.h"
#include "runtime/runtime.h"
#include "tests/sim/sim_test_util.h"
#include "tests/testing/runtime_parts.h"

namespace kvtier::testing {
namespace {

using RuntimeTickTest = SimDeviceTest;  // its SetUp skips without userfaultfd

Result<std::unique_ptr<Runtime>> MakeRuntime(const char* tick_ms,
                                             Runtime::Parts parts = PolicyParts()) {
  const std::map<std::string, std::string> values = {{"KVTIER_DEVICE_BUDGET", "1M"},
                                                     {"KVTIER_HOST_BUDGET", "16M"},
                                                     {"KVTIER_PAGE_SIZE", "64K"},
                                                     {"KVTIER_TICK_MS", tick_ms},
                                                     {"KVTIER_STATS", "0"}};
  Result<Options> options = ParseOptions([&](const char* name) -> const char* {
    auto it = values.find(name);
    return it == values.end() ? nullptr : it->second.c_str();
  });
  if (!options.ok()) return options.status();
  return Runtime::Create(options.value(), std::move(parts));
}

// A policy that keeps the signals it is shown and decides nothing.
class RecordingPolicy final : public Policy {
 public:
  explicit RecordingPolicy(std::vector<Signal>* seen) : seen_(seen) {}
  const char* name() const override { return "recording"; }
  void OnSignal(const Signal& signal, const Region&) override { seen_->push_back(signal); }
  void Decide(const PolicyView&, Decisions*) override {}

 private:
  std::vector<Signal>* seen_;
};

TEST_F(RuntimeTickTest, SignalsCarryTheTimeOfTheRuntimesClock) {
  ManualClock clock(7'000'000'000);
  std::vector<Signal> seen;
  std::string asked_for;
  Runtime::Parts parts = PolicyParts();
  parts.policy = [&](std::string_view name, const PolicySettings&) -> std::unique_ptr<Policy> {
    asked_for = std::string(name);
    return std::make_unique<RecordingPolicy>(&seen);
  };
  parts.clock = &clock;
  parts.start_threads = false;  // ticks by hand
  Result<std::unique_ptr<Runtime>> made = MakeRuntime("1000", std::move(parts));
  ASSERT_TRUE(made.ok()) << made.status().message();
  Runtime& rt = *made.value();
  EXPECT_EQ(rt.options().policy, "auto");
  EXPECT_EQ(asked_for, "predictive") << "auto stands for the backend's policy";

  constexpr size_t kPage = 64 << 10;
  Result<void*> base = rt.CreateRegion(4 * kPage, nullptr);
  ASSERT_TRUE(base.ok()) << base.status().message();
  auto* bytes = static_cast<uint8_t*>(base.value());
  ASSERT_TRUE(rt.Hint(bytes, kPage, SignalKind::kCold).ok());
  clock.Advance(1'000'000'000);
  bytes[2 * kPage] = 1;  // a first touch: a fault on page 2
  // The fault thread reports the fault after it let the engine run on: wait
  // for its signal (the hint's is the first).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (Counters::Get(rt.counters().signals) < 2 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  rt.Tick();

  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].kind, SignalKind::kCold);
  EXPECT_EQ(seen[0].time_ns, 7'000'000'000u);
  EXPECT_EQ(seen[1].kind, SignalKind::kFault);
  EXPECT_EQ(seen[1].page, 2u);
  EXPECT_EQ(seen[1].time_ns, 8'000'000'000u);
  EXPECT_TRUE(rt.FreeRegion(base.value()));
}

TEST_F(RuntimeTickTest, ADriverEvictionTicksThePolicyBeforeItsPeriod) {
  // A 10 s period: without the early tick, none comes within the test.
  Result<std::unique_ptr<Runtime>> made = MakeRuntime("10000");
  ASSERT_TRUE(made.ok()) << made.status().message();
  Runtime& rt = *made.value();
  const auto start = std::chrono::steady_clock::now();
  constexpr size_t kBytes = 4 << 20;  // 64 pages on a 16-page device
  Result<void*> base = rt.CreateRegion(kBytes, nullptr);
  ASSERT_TRUE(base.ok()) << base.status().message();
  std::memset(base.value(), 0x5a, kBytes);
  const Counters& c = rt.counters();
  ASSERT_GT(Counters::Get(c.driver_evictions), 0u) << "the device must have been full";
  // The policy thread ticks on its own; wait for it, at most 5 s.
  while (Counters::Get(c.policy_ticks) == 0 &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(5)) {
    // Polls a condition under a deadline; no race depends on this pause.
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_GT(Counters::Get(c.policy_ticks), 0u) << "no tick within 5 s of a driver eviction";
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_TRUE(rt.FreeRegion(base.value()));
}

TEST_F(RuntimeTickTest, WithoutEvictionsThePolicyTicksOnItsPeriod) {
  Result<std::unique_ptr<Runtime>> made = MakeRuntime("5");
  ASSERT_TRUE(made.ok()) << made.status().message();
  Runtime& rt = *made.value();
  const Counters& c = rt.counters();
  // Ticks start every 5 ms however long each takes: 20 of them within 2 s
  // even on a loaded machine (a period after each tick's end would drift,
  // not fail; this catches a loop that stops ticking).
  const auto start = std::chrono::steady_clock::now();
  while (Counters::Get(c.policy_ticks) < 20 &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(2)) {
    // Polls a condition under a deadline; no race depends on this pause.
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_GE(Counters::Get(c.policy_ticks), 20u);
  EXPECT_EQ(Counters::Get(c.driver_evictions), 0u);
}

TEST_F(RuntimeTickTest, AFaultFromTheHostTicksThePolicyBeforeItsPeriod) {
  // A 10 s period: without the early tick, none comes within the test.
  Result<std::unique_ptr<Runtime>> made = MakeRuntime("10000");
  ASSERT_TRUE(made.ok()) << made.status().message();
  Runtime& rt = *made.value();
  constexpr size_t kBytes = 512 << 10;  // 8 pages on a 16-page device
  Result<void*> base = rt.CreateRegion(kBytes, nullptr);
  ASSERT_TRUE(base.ok()) << base.status().message();
  auto* bytes = static_cast<volatile uint8_t*>(base.value());
  std::memset(base.value(), 0x5a, kBytes);  // first touches: nothing to hurry for
  const Counters& c = rt.counters();
  ASSERT_EQ(Counters::Get(c.driver_evictions), 0u);
  ASSERT_EQ(Counters::Get(c.policy_ticks), 0u) << "a first touch ticked the policy";
  RegionPtr region = rt.regions().Find(reinterpret_cast<uintptr_t>(base.value()));
  ASSERT_TRUE(region);
  ASSERT_TRUE(rt.device().Demote(*region, 3).ok());
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(bytes[3 * (64 << 10)], 0x5a);  // the engine waits on a page from the host
  while (Counters::Get(c.policy_ticks) == 0 &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(5)) {
    // Polls a condition under a deadline; no race depends on this pause.
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_GT(Counters::Get(c.policy_ticks), 0u) << "no tick within 5 s of a fault from the host";
  EXPECT_TRUE(rt.FreeRegion(base.value()));
}

TEST_F(RuntimeTickTest, AWillNeedHintTicksThePolicyBeforeItsPeriodAndAColdOneDoesNot) {
  // A 10 s period: without the early tick, none comes within the test.
  Result<std::unique_ptr<Runtime>> made = MakeRuntime("10000");
  ASSERT_TRUE(made.ok()) << made.status().message();
  Runtime& rt = *made.value();
  constexpr size_t kPage = 64 << 10;
  Result<void*> base = rt.CreateRegion(8 * kPage, nullptr);
  ASSERT_TRUE(base.ok()) << base.status().message();
  auto* bytes = static_cast<uint8_t*>(base.value());
  const Counters& c = rt.counters();
  // COLD asks for nothing soon: the policy demotes at its own pace.
  ASSERT_TRUE(rt.Hint(bytes, 2 * kPage, SignalKind::kCold).ok());
  const auto start = std::chrono::steady_clock::now();
  while (Counters::Get(c.policy_ticks) == 0 &&
         std::chrono::steady_clock::now() - start < std::chrono::milliseconds(200)) {
    // Polls a condition under a deadline; no race depends on this pause.
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(Counters::Get(c.policy_ticks), 0u) << "a COLD hint ticked the policy";
  // WILL_NEED: the engine reads the range next, so the policy starts now.
  ASSERT_TRUE(rt.Hint(bytes + 4 * kPage, 2 * kPage, SignalKind::kWillNeed).ok());
  while (Counters::Get(c.policy_ticks) == 0 &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(5)) {
    // Polls a condition under a deadline; no race depends on this pause.
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_GT(Counters::Get(c.policy_ticks), 0u) << "no tick within 5 s of a WILL_NEED hint";
  EXPECT_TRUE(rt.FreeRegion(base.value()));
}

TEST_F(RuntimeTickTest, ABurstOfEarlyTicksLeavesThePeriodicOnesInPlace) {
  Result<std::unique_ptr<Runtime>> made = MakeRuntime("50");
  ASSERT_TRUE(made.ok()) << made.status().message();
  Runtime& rt = *made.value();
  constexpr size_t kPage = 64 << 10;
  constexpr size_t kBytes = 8 * kPage;  // fits the 16-page device
  Result<void*> base = rt.CreateRegion(kBytes, nullptr);
  ASSERT_TRUE(base.ok()) << base.status().message();
  auto* bytes = static_cast<volatile uint8_t*>(base.value());
  std::memset(base.value(), 0x5a, kBytes);
  RegionPtr region = rt.regions().Find(reinterpret_cast<uintptr_t>(base.value()));
  ASSERT_TRUE(region);
  const Counters& c = rt.counters();
  // 300 ms of faults from the host: early ticks, one per 10 ms at most.
  const auto burst_end = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  uint32_t faults = 0;
  while (std::chrono::steady_clock::now() < burst_end) {
    const uint32_t page = faults++ % 8;
    if (rt.device().Demote(*region, page).ok()) {
      EXPECT_EQ(bytes[page * kPage], 0x5a);
    }
  }
  const uint64_t after_burst = Counters::Get(c.policy_ticks);
  // Then nothing: the periodic ticks (every 50 ms) go on at once, not after
  // a period for each early tick of the burst.
  const auto start = std::chrono::steady_clock::now();
  while (Counters::Get(c.policy_ticks) < after_burst + 3 &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(5)) {
    // Polls a condition under a deadline; no race depends on this pause.
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_GE(Counters::Get(c.policy_ticks), after_burst + 3);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(600))
      << "the periodic ticks were pushed back by the early ones";
  EXPECT_TRUE(rt.FreeRegion(base.value()));
}

}  // namespace
}  // namespace kvtier::testing
