// The runtime's policy ticks on the simulated GPU: on its period, and early
// when the device had to evict a page itself (it was full at a fault), so
// the policy makes room before the next fault waits on an eviction too;
// when the engine waits on a page from the host, so the rest of its group
// comes back in bulk; and when it hints that it will need a range
// (WILL_NEED). TickSchedule (tick_schedule_test.cc) says when; these tests
// check that the runtime's events reach it. They run the policy thread's
// step, Runtime::PolicyStep, on times of their own (no thread, no wall
// clock), and one test checks that the thread itself wakes for an early
// tick. Signals carry the time of the clock the runtime was given.
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
#include "start/bootstrap.h"
#include "tests/sim/sim_test_util.h"

namespace kvtier::testing {
namespace {

using RuntimeTickTest = SimDeviceTest;  // its SetUp skips without userfaultfd

constexpr uint64_t kMs = 1'000'000;
constexpr uint64_t kS = 1'000 * kMs;
constexpr size_t kPage = 64 << 10;

Result<std::unique_ptr<Runtime>> MakeRuntime(const char* tick_ms, Runtime::Parts parts) {
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

// A runtime whose policy ticks only when the test steps it.
Result<std::unique_ptr<Runtime>> MakeSteppedRuntime(const char* tick_ms) {
  Runtime::Parts parts = SimParts();
  parts.start_threads = false;
  return MakeRuntime(tick_ms, std::move(parts));
}

uint64_t Ticks(Runtime& rt) { return Counters::Get(rt.counters().policy_ticks); }

// Steps the policy at `now_ns` until it says the next tick is due at
// `due_ns` (at most 5 s of wall time). The device reports a fault or an
// eviction from its fault thread after the engine has run on, so the
// report that asks for an early tick arrives a moment later.
bool StepUntilDueAt(Runtime& rt, uint64_t now_ns, uint64_t due_ns) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (rt.PolicyStep(now_ns) != due_ns) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
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
  Runtime::Parts parts = SimParts();
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

TEST_F(RuntimeTickTest, WithoutEventsThePolicyTicksOnItsPeriod) {
  Result<std::unique_ptr<Runtime>> made = MakeSteppedRuntime("5");
  ASSERT_TRUE(made.ok()) << made.status().message();
  Runtime& rt = *made.value();
  EXPECT_EQ(rt.PolicyStep(0), 5 * kMs);  // the first look starts the period
  EXPECT_EQ(rt.PolicyStep(5 * kMs - 1), 5 * kMs);
  EXPECT_EQ(Ticks(rt), 0u);
  EXPECT_EQ(rt.PolicyStep(5 * kMs), 10 * kMs);
  EXPECT_EQ(rt.PolicyStep(10 * kMs), 15 * kMs);
  EXPECT_EQ(Ticks(rt), 2u);
  // Late by more than a period: one catch-up at once, then the period.
  EXPECT_EQ(rt.PolicyStep(37 * kMs), 37 * kMs);
  EXPECT_EQ(rt.PolicyStep(37 * kMs), 42 * kMs);
  EXPECT_EQ(Ticks(rt), 4u);
}

TEST_F(RuntimeTickTest, ADriverEvictionTicksThePolicyBeforeItsPeriod) {
  // A 10 s period: an early tick comes a fifth of it after the last start.
  Result<std::unique_ptr<Runtime>> made = MakeSteppedRuntime("10000");
  ASSERT_TRUE(made.ok()) << made.status().message();
  Runtime& rt = *made.value();
  ASSERT_EQ(rt.PolicyStep(0), 10 * kS);
  constexpr size_t kBytes = 4 << 20;  // 64 pages on a 16-page device
  Result<void*> base = rt.CreateRegion(kBytes, nullptr);
  ASSERT_TRUE(base.ok()) << base.status().message();
  std::memset(base.value(), 0x5a, kBytes);
  ASSERT_GT(Counters::Get(rt.counters().driver_evictions), 0u) << "the device must be full";
  EXPECT_TRUE(StepUntilDueAt(rt, 1 * kS, 2 * kS)) << "no early tick asked for an eviction";
  EXPECT_EQ(Ticks(rt), 0u) << "an early tick came within a fifth of the period";
  rt.PolicyStep(2 * kS);
  EXPECT_EQ(Ticks(rt), 1u);
  EXPECT_TRUE(rt.FreeRegion(base.value()));
}

TEST_F(RuntimeTickTest, AFaultFromTheHostTicksThePolicyBeforeItsPeriodAndAFirstTouchDoesNot) {
  Result<std::unique_ptr<Runtime>> made = MakeSteppedRuntime("10000");
  ASSERT_TRUE(made.ok()) << made.status().message();
  Runtime& rt = *made.value();
  ASSERT_EQ(rt.PolicyStep(0), 10 * kS);
  constexpr size_t kPages = 8;  // on a 16-page device
  Result<void*> base = rt.CreateRegion(kPages * kPage, nullptr);
  ASSERT_TRUE(base.ok()) << base.status().message();
  auto* bytes = static_cast<volatile uint8_t*>(base.value());
  std::memset(base.value(), 0x5a, kPages * kPage);  // first touches: nothing to hurry for
  const Counters& c = rt.counters();
  ASSERT_EQ(Counters::Get(c.driver_evictions), 0u);
  // Every first touch's report in (one signal each), none asked early.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (Counters::Get(c.signals) < kPages && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  ASSERT_GE(Counters::Get(c.signals), kPages);
  EXPECT_EQ(rt.PolicyStep(1 * kS), 10 * kS) << "a first touch asked for an early tick";

  RegionPtr region = rt.regions().Find(reinterpret_cast<uintptr_t>(base.value()));
  ASSERT_TRUE(region);
  ASSERT_TRUE(rt.device().Demote(*region, 3).ok());
  EXPECT_EQ(bytes[3 * kPage], 0x5a);  // the engine waits on a page from the host
  EXPECT_TRUE(StepUntilDueAt(rt, 1 * kS, 2 * kS))
      << "no early tick asked for a fault from the host";
  rt.PolicyStep(2 * kS);
  EXPECT_EQ(Ticks(rt), 1u);
  EXPECT_TRUE(rt.FreeRegion(base.value()));
}

TEST_F(RuntimeTickTest, AWillNeedHintTicksThePolicyBeforeItsPeriodAndAColdOneDoesNot) {
  Result<std::unique_ptr<Runtime>> made = MakeSteppedRuntime("10000");
  ASSERT_TRUE(made.ok()) << made.status().message();
  Runtime& rt = *made.value();
  ASSERT_EQ(rt.PolicyStep(0), 10 * kS);
  Result<void*> base = rt.CreateRegion(8 * kPage, nullptr);
  ASSERT_TRUE(base.ok()) << base.status().message();
  auto* bytes = static_cast<uint8_t*>(base.value());
  // COLD asks for nothing soon: the policy demotes at its own pace. (A hint
  // asks, if it does, before Hint returns.)
  ASSERT_TRUE(rt.Hint(bytes, 2 * kPage, SignalKind::kCold).ok());
  EXPECT_EQ(rt.PolicyStep(1 * kS), 10 * kS) << "a COLD hint asked for an early tick";
  // WILL_NEED: the engine reads the range next, so the policy starts now.
  ASSERT_TRUE(rt.Hint(bytes + 4 * kPage, 2 * kPage, SignalKind::kWillNeed).ok());
  EXPECT_EQ(rt.PolicyStep(1 * kS), 2 * kS);
  EXPECT_EQ(Ticks(rt), 0u);
  EXPECT_EQ(rt.PolicyStep(2 * kS), 10 * kS) << "the early tick moved the periodic one";
  EXPECT_EQ(Ticks(rt), 1u);
  EXPECT_TRUE(rt.FreeRegion(base.value()));
}

TEST_F(RuntimeTickTest, ABurstOfEarlyTicksLeavesThePeriodicOnesInPlace) {
  // A 50 ms period: early ticks at most every 10 ms.
  Result<std::unique_ptr<Runtime>> made = MakeSteppedRuntime("50");
  ASSERT_TRUE(made.ok()) << made.status().message();
  Runtime& rt = *made.value();
  ASSERT_EQ(rt.PolicyStep(0), 50 * kMs);
  Result<void*> base = rt.CreateRegion(8 * kPage, nullptr);
  ASSERT_TRUE(base.ok()) << base.status().message();
  auto* bytes = static_cast<uint8_t*>(base.value());
  // Four WILL_NEED hints 5 ms apart, each stepped when it comes: the early
  // ticks fall 10 ms apart, and each asks for one more.
  uint64_t now = 10 * kMs;
  for (int i = 0; i < 4; ++i, now += 5 * kMs) {
    ASSERT_TRUE(rt.Hint(bytes, kPage, SignalKind::kWillNeed).ok());
    rt.PolicyStep(now);
  }
  EXPECT_EQ(Ticks(rt), 2u) << "early ticks at 10 and 20 ms; 15 and 25 ms were too soon";
  // The periodic tick stays at 50 ms, not a period after the last early one.
  EXPECT_EQ(rt.PolicyStep(30 * kMs), 50 * kMs) << "the early tick asked at 25 ms comes at 30";
  EXPECT_EQ(Ticks(rt), 3u);
  EXPECT_EQ(rt.PolicyStep(50 * kMs), 100 * kMs);
  EXPECT_EQ(Ticks(rt), 4u);
  EXPECT_TRUE(rt.FreeRegion(base.value()));
}

TEST_F(RuntimeTickTest, ThePolicyThreadWakesForAnEarlyTick) {
  // The thread on its own, with a 10 s period: a tick within 8 s is an
  // early one, woken by the hint. (The first may come a fifth of a period,
  // 2 s, after the thread's start.)
  Result<std::unique_ptr<Runtime>> made = MakeRuntime("10000", SimParts());
  ASSERT_TRUE(made.ok()) << made.status().message();
  Runtime& rt = *made.value();
  Result<void*> base = rt.CreateRegion(8 * kPage, nullptr);
  ASSERT_TRUE(base.ok()) << base.status().message();
  ASSERT_TRUE(rt.Hint(base.value(), kPage, SignalKind::kWillNeed).ok());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(8);
  while (Ticks(rt) == 0 && std::chrono::steady_clock::now() < deadline) {
    // Polls a condition under a deadline; no race depends on this pause.
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_GT(Ticks(rt), 0u) << "the policy thread slept through a WILL_NEED hint";
  EXPECT_TRUE(rt.FreeRegion(base.value()));
}

}  // namespace
}  // namespace kvtier::testing
