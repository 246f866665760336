// PolicyBed: a table of regions and page states for policy tests, ticked by
// the runtime's own TickEngine and Mover.
//
// Pages are written as strings, one char per page: D device, H host, S disk,
// U untouched, P device+pinned, M device+in-flight, W host+will-need
// (SetPage). Signals go through
// TickEngine::ApplySignals; Tick() runs TickEngine::Tick on an InstantDevice
// (each move takes effect at once), so tests see what the policy decided
// and the page states after the shipped mover executed it, tick after tick.
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

// A device whose moves take effect at once: a page changes tier in the call.
// Residency is counted over the bed's regions; capacity is what the test
// says for the tick.
class InstantDevice final : public Device {
 public:
  explicit InstantDevice(const std::vector<RegionPtr>* regions) : regions_(regions) {}
  const char* kind() const override { return "instant"; }
  Result<RegionPtr> CreateRegion(RegionId, size_t, size_t, std::string) override {
    return Status::Error("instant device: the bed makes regions");
  }
  void DestroyRegion(Region&) override {}
  Status Demote(Region& region, uint32_t page) override {
    return Flip(region, page, Tier::kHost, [](Tier t) { return t == Tier::kDevice; });
  }
  Status Promote(Region& region, uint32_t page) override {
    return Flip(region, page, Tier::kDevice, [](Tier t) { return t != Tier::kDevice; });
  }
  Status Spill(Region& region, uint32_t page) override {
    if (zero_pages.count(page) && region.pages[page].tier.load() == Tier::kHost) {
      region.pages[page].tier.store(Tier::kUntouched);  // dropped, written nowhere
      return Status::Ok();
    }
    return Flip(region, page, Tier::kDisk, [](Tier t) { return t == Tier::kHost; });
  }
  // Pages that hold zeros: a spill drops them (untouched again), as the
  // simulated GPU does.
  std::set<uint32_t> zero_pages;
  uint64_t resident_bytes() const override { return Count(Tier::kDevice) * kTestPage; }
  uint64_t capacity_bytes() const override { return capacity_; }
  void set_capacity(uint64_t bytes) { capacity_ = bytes; }
  uint64_t Count(Tier t) const {
    uint64_t n = 0;
    for (const auto& r : *regions_)
      for (size_t i = 0; i < r->pages.size(); ++i) n += r->pages[i].tier.load() == t;
    return n;
  }
  std::vector<Move> log;          // every move carried out, in order
  std::function<void()> on_move;  // called after each move (a test's clock)

 private:
  template <typename From>
  Status Flip(Region& region, uint32_t page, Tier to, From from) {
    PageRecord& rec = region.pages[page];
    if (!from(rec.tier.load())) return Status::Ok();
    rec.tier = to;
    log.push_back({region.id, page, to});
    if (on_move) on_move();
    return Status::Ok();
  }
  const std::vector<RegionPtr>* regions_;
  uint64_t capacity_ = 0;
};

class PolicyBed {
 public:
  PolicyBed() : device_(&regions_) {}

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
