// VirtualTicker: when the bench's ticks fall, as the runtime's policy thread
// would tick: on the period while there is work, and early (no closer than
// a fifth of a period to the last tick) when the engine waits on a page from
// the host or the device evicted one itself.
#include "tools/bench/virtual_ticker.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

namespace kvtier::bench {
namespace {

constexpr size_t kPage = 2 << 20;
constexpr uint64_t kMs = 1'000'000;

ModelCosts Costs() {
  ModelCosts c;
  c.device_bytes = 4 * kPage;
  c.host_bytes = 100 * kPage;
  c.h2d_bps = 2e9;
  c.d2h_bps = 2e9;
  c.fault_bps = 1e9;
  c.fault_batch_ns = 10'000;
  c.fault_batch_blocks = 1;
  return c;
}

// Records the virtual time of each tick; decides nothing.
struct TickTimes final : Policy {
  const ModelDevice* device = nullptr;
  std::vector<uint64_t> at;
  const char* name() const override { return "tick-times"; }
  void Decide(const PolicyView&, Decisions*) override { at.push_back(device->now_ns()); }
};

struct Bed final : DeviceEvents {
  Bed() : device(Costs(), this), ticker(&device, MakePolicy(), TickEngineConfig{}) {
    region = device.CreateRegion(1, 4 * kPage, kPage, "t").value();
    ticker.AddRegion(region);
  }
  std::unique_ptr<Policy> MakePolicy() {
    auto p = std::make_unique<TickTimes>();
    p->device = &device;
    times = p.get();
    return p;
  }
  // The engine reads `page` at `t_ns`, after the ticks due before then.
  void TouchAt(uint64_t t_ns, uint32_t page) {
    ticker.RunUntil(t_ns);
    device.AdvanceTo(t_ns);
    (void)device.Touch(*region, &page, 1);
  }
  void OnFault(Region& r, uint32_t page, Tier from, uint64_t wait_ns) override {
    ticker.OnFault(r, page, from, wait_ns);
  }
  void OnDriverEviction(Region& r, uint32_t page) override { ticker.OnDriverEviction(r, page); }

  TickTimes* times = nullptr;
  ModelDevice device;
  VirtualTicker ticker;
  RegionPtr region;
};

TEST(VirtualTicker, AFirstTouchWaitsForThePeriodAFaultFromTheHostDoesNot) {
  Bed b;
  b.TouchAt(1 * kMs, 0);  // a first touch: the next period boundary will do
  b.TouchAt(1 * kMs, 1);
  b.ticker.RunUntil(15 * kMs);
  ASSERT_EQ(b.times->at, (std::vector<uint64_t>{10 * kMs}));
  ASSERT_TRUE(b.device.Demote(*b.region, 0).ok());
  ASSERT_TRUE(b.device.Demote(*b.region, 1).ok());
  b.ticker.RunUntil(30 * kMs);
  b.times->at.clear();
  // The engine waits on page 0 from the host at 40.5 ms: a tick then, not at
  // 50 ms; a second such fault half a millisecond later ticks 2 ms (a fifth
  // of the period) after that one.
  b.TouchAt(40 * kMs + kMs / 2, 0);
  b.TouchAt(41 * kMs, 1);
  b.ticker.RunUntil(45 * kMs);
  ASSERT_GE(b.times->at.size(), 2u);
  EXPECT_EQ(b.times->at[0], 40 * kMs + kMs / 2);
  EXPECT_EQ(b.times->at[1], 42 * kMs + kMs / 2);
}

}  // namespace
}  // namespace kvtier::bench
