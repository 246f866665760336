// PolicyBed: a table of regions and page states for policy tests, ticked by
// the runtime's own TickEngine and Mover.
//
// Pages are written as strings, one char per page: D device, H host, S disk,
// U untouched, P device+pinned, M device+in-flight, W host+will-need
// (SetPage). Signals go through TickEngine::ApplySignals; Tick() runs
// TickEngine::Tick on an InstantDevice (tests/testing/instant_device.h: each
// move takes effect at once), so tests see what the policy decided and the
// page states after the shipped mover executed it, tick after tick.
// Thread-safety: test thread only.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "runtime/clock.h"
#include "runtime/device/device.h"
#include "runtime/policy.h"
#include "runtime/tick_engine.h"
#include "tests/testing/instant_device.h"

namespace kvtier::testing {

inline constexpr size_t kTestPage = 1 << 20;
inline constexpr uint64_t kTestTickNs = 10'000'000;

// Sets a page's tier and flags from its letter (see top).
inline void SetPage(PageRecord& rec, char letter) {
  struct State {
    char letter;
    Tier tier;
    uint8_t flags;
  };
  static constexpr State kStates[] = {
      {'D', Tier::kDevice, 0},
      {'H', Tier::kHost, 0},
      {'S', Tier::kDisk, 0},
      {'U', Tier::kUntouched, 0},
      {'P', Tier::kDevice, kPagePinned},
      {'M', Tier::kDevice, kPageInFlight},
      {'W', Tier::kHost, kPageWillNeed},
  };
  for (const State& st : kStates) {
    if (st.letter == letter) {
      rec.tier = st.tier;
      rec.flags = st.flags;
      return;
    }
  }
  ADD_FAILURE() << "no page state is written '" << letter << "'";
}

class PolicyBed {
 public:
  PolicyBed() : device_(&regions_, kTestPage) {}

  Region& AddRegion(const std::string& pages) {
    auto r = std::make_shared<Region>(static_cast<RegionId>(regions_.size() + 1),
                                      0x100000000ull * (regions_.size() + 1),
                                      pages.size() * kTestPage, kTestPage, "test");
    for (size_t i = 0; i < pages.size(); ++i) SetPage(r->pages[i], pages[i]);
    regions_.push_back(r);
    return *r;
  }
  Region& region(RegionId id) { return *regions_[id - 1]; }
  const std::vector<RegionPtr>& regions() const { return regions_; }
  InstantDevice& device() { return device_; }
  uint32_t now() const { return now_; }
  void Advance(uint32_t ticks = 1) { now_ += ticks; }
  // The mover's cap on bytes per tick (KVTIER_MOVE_BYTES_PER_TICK); set
  // before the first signal or tick.
  void set_move_cap(uint64_t bytes) { mover_.cap_bytes = bytes; }

  // Sends one signal for `pages` pages from `page` of region `id`.
  void Send(Policy& policy, SignalKind kind, RegionId id, uint32_t page, Tier from = Tier::kHost,
            uint32_t pages = 1) {
    Signal s;
    s.kind = kind;
    s.region = id;
    s.page = page;
    s.pages = pages;
    s.from = from;
    Engine(policy).ApplySignals({&s, 1}, regions_, now_);
  }
  // A touch of a page that is not on the device: it faults and arrives.
  void Fault(Policy& policy, RegionId id, uint32_t page) {
    Tier from = region(id).pages[page].tier.load();
    region(id).pages[page].tier = Tier::kDevice;
    Send(policy, SignalKind::kFault, id, page, from);
  }

  uint64_t Count(Tier t) const { return device_.Count(t); }
  // One tick of the runtime's TickEngine: the policy decides (returned) and
  // the mover carries it out. Budgets in pages; watermarks at 90% and 75%,
  // the runtime's defaults.
  Decisions Tick(Policy& policy, uint64_t device_pages, uint64_t host_pages = 1000,
                 uint64_t disk_pages = 0) {
    TickEngine& engine = Engine(policy);
    device_.set_capacity(device_pages * kTestPage);
    TierBytes usage;
    usage.host_used = Count(Tier::kHost) * kTestPage;
    usage.host_budget = host_pages * kTestPage;
    usage.disk_used = Count(Tier::kDisk) * kTestPage;
    usage.disk_budget = disk_pages * kTestPage;
    clock_.Set(uint64_t{now_ - 1} * kTestTickNs);
    last_report_ = engine.Tick({}, regions_, usage);
    now_ = engine.tick();
    return recorder_.last;
  }
  const TickReport& last_report() const { return last_report_; }

 private:
  // Forwards to the policy under test and keeps its last decisions.
  struct Recorder final : Policy {
    Policy* inner = nullptr;
    Decisions last;
    const char* name() const override { return inner->name(); }
    void OnSignal(const Signal& s, const Region& r) override { inner->OnSignal(s, r); }
    void Decide(const PolicyView& view, Decisions* out) override {
      inner->Decide(view, out);
      last = *out;
    }
  };
  TickEngine& Engine(Policy& policy) {
    if (!engine_ || recorder_.inner != &policy) {
      recorder_.inner = &policy;
      TickEngineConfig config;
      config.tick_ns = kTestTickNs;
      config.mover = mover_;
      clock_.Set(0);
      engine_ = std::make_unique<TickEngine>(device_, recorder_, clock_, config);
    }
    return *engine_;
  }

  std::vector<RegionPtr> regions_;
  InstantDevice device_;
  ManualClock clock_;
  MoverConfig mover_;
  Recorder recorder_;
  std::unique_ptr<TickEngine> engine_;
  TickReport last_report_;
  uint32_t now_ = 1;
};

// The moves of `d` to `to`, as "region:page" strings, in order.
inline std::vector<std::string> MovesTo(const Decisions& d, Tier to) {
  std::vector<std::string> out;
  for (const Move& m : d.moves) {
    if (m.to == to) out.push_back(std::to_string(m.region) + ":" + std::to_string(m.page));
  }
  return out;
}

}  // namespace kvtier::testing
