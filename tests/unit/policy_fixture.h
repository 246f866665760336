// PolicyBed: a table of regions and page states for policy tests.
//
// Pages are written as strings, one char per page: D device, H host, S disk,
// U untouched, P device+pinned, M device+in-flight. Signals go through
// ApplySignal and Policy::OnSignal as the runtime's tick does; Apply() plays
// the moves of a Decisions (tiers change at once, last_move = now), so tests
// can run several ticks. Thread-safety: test thread only.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/policy.h"
#include "runtime/signal_apply.h"

namespace kvtier::testing {

inline constexpr size_t kTestPage = 1 << 20;

class PolicyBed {
 public:
  Region& AddRegion(const std::string& pages) {
    auto r = std::make_shared<Region>(static_cast<RegionId>(regions_.size() + 1),
                                      0x100000000ull * (regions_.size() + 1),
                                      pages.size() * kTestPage, kTestPage, "test");
    for (size_t i = 0; i < pages.size(); ++i) {
      PageRecord& rec = r->pages[i];
      switch (pages[i]) {
        case 'D':
          rec.tier = Tier::kDevice;
          break;
        case 'H':
          rec.tier = Tier::kHost;
          break;
        case 'S':
          rec.tier = Tier::kDisk;
          break;
        case 'U':
          rec.tier = Tier::kUntouched;
          break;
        case 'P':
          rec.tier = Tier::kDevice;
          rec.flags = kPagePinned;
          break;
        case 'M':
          rec.tier = Tier::kDevice;
          rec.flags = kPageInFlight;
          break;
      }
    }
    regions_.push_back(r);
    return *r;
  }
  Region& region(RegionId id) { return *regions_[id - 1]; }
  uint32_t now() const { return now_; }
  void Advance(uint32_t ticks = 1) { now_ += ticks; }

  // Sends one signal for `pages` pages from `page` of region `id`.
  void Send(Policy& policy, SignalKind kind, RegionId id, uint32_t page, Tier from = Tier::kHost,
            uint32_t pages = 1) {
    Signal s;
    s.kind = kind;
    s.region = id;
    s.page = page;
    s.pages = pages;
    s.from = from;
    ApplySignal(region(id), s, now_);
    policy.OnSignal(s, region(id));
  }
  // A touch of a page that is not on the device: it faults and arrives.
  void Fault(Policy& policy, RegionId id, uint32_t page) {
    Tier from = region(id).pages[page].tier.load();
    region(id).pages[page].tier = Tier::kDevice;
    Send(policy, SignalKind::kFault, id, page, from);
  }

  uint64_t Count(Tier t) const {
    uint64_t n = 0;
    for (const auto& r : regions_)
      for (size_t i = 0; i < r->pages.size(); ++i) n += r->pages[i].tier.load() == t;
    return n;
  }
  // Budgets in pages; watermarks at 90% and 75% as the runtime's defaults.
  PolicyView View(uint64_t device_pages, uint64_t host_pages = 1000, uint64_t disk_pages = 0) {
    PolicyView v;
    v.now = now_;
    v.regions = &regions_;
    auto usage = [](uint64_t used_pages, uint64_t budget_pages) {
      TierUsage u;
      u.used = used_pages * kTestPage;
      u.budget = budget_pages * kTestPage;
      u.high = u.budget * 90 / 100;
      u.low = u.budget * 75 / 100;
      return u;
    };
    v.tier[0] = usage(Count(Tier::kDevice), device_pages);
    v.tier[1] = usage(Count(Tier::kHost), host_pages);
    v.tier[2] = usage(Count(Tier::kDisk), disk_pages);
    return v;
  }
  // One tick: Decide, then play the moves.
  Decisions Tick(Policy& policy, uint64_t device_pages, uint64_t host_pages = 1000,
                 uint64_t disk_pages = 0) {
    Decisions d;
    policy.Decide(View(device_pages, host_pages, disk_pages), &d);
    Apply(d);
    return d;
  }
  void Apply(const Decisions& d) {
    for (const Move& m : d.moves) {
      PageRecord& rec = region(m.region).pages[m.page];
      rec.tier = m.to;
      rec.last_move = now_;
      if (m.to == Tier::kDevice) {
        rec.flags.fetch_and(static_cast<uint8_t>(~kPageWillNeed));
      }
    }
  }

 private:
  std::vector<RegionPtr> regions_;
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
