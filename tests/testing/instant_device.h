// InstantDevice: a Device whose moves take effect at once (a page changes
// tier in the call), for what runs the shipped TickEngine and Mover without
// a real device: the policy and mover tests (tests/unit/policy_fixture.h,
// mover_test.cc) and tools/perf/policy_tick, which times a tick with nothing
// else in it. It records the moves it carried out.
//
// Residency is counted one of two ways:
//  - over the regions it is given, at each ask: tests set pages' tiers by
//    hand between ticks (SetPage), and the count follows;
//  - given none, as tiers change through it (its moves, and Set for a change
//    the engine makes itself, a fault): nothing to count per ask, at
//    millions of pages.
// Thread-safety: one thread (the test's, or the benchmark's).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "runtime/device/device.h"

namespace kvtier::testing {

class InstantDevice final : public Device {
 public:
  // Counts residency over `regions` (see top).
  InstantDevice(const std::vector<RegionPtr>* regions, size_t page_bytes)
      : regions_(regions), page_bytes_(page_bytes) {}
  // Counts residency as tiers change through it.
  explicit InstantDevice(size_t page_bytes) : page_bytes_(page_bytes) {}

  Backend backend() const override { return Backend::kSim; }  // a GPU's stand-in
  const char* kind() const override { return "instant"; }
  Result<RegionPtr> CreateRegion(RegionId, size_t, size_t, std::string) override {
    return Status::Error("instant device: its user makes the regions");
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
  uint64_t resident_bytes() const override {
    return (regions_ ? Count(Tier::kDevice) : resident_) * page_bytes_;
  }
  uint64_t capacity_bytes() const override { return capacity_; }
  void set_capacity(uint64_t bytes) { capacity_ = bytes; }

  // A change of tier the engine makes itself (a fault), counted as a move's.
  void Set(Region& region, uint32_t page, Tier to) {
    PageRecord& rec = region.pages[page];
    Account(rec.tier.load(std::memory_order_relaxed), to);
    rec.tier.store(to, std::memory_order_relaxed);
  }
  // Pages in tier `t` over the regions it was given (none: 0).
  uint64_t Count(Tier t) const {
    uint64_t n = 0;
    if (!regions_) return n;
    for (const auto& r : *regions_)
      for (size_t i = 0; i < r->pages.size(); ++i) n += r->pages[i].tier.load() == t;
    return n;
  }

  // Pages that hold zeros: a spill drops them (untouched again), as the
  // memfd device does.
  std::set<uint32_t> zero_pages;
  std::vector<Move> log;          // every move carried out, in order (keep_log)
  bool keep_log = true;           // off for a benchmark of millions of moves
  std::function<void()> on_move;  // called after each move (a test's clock)

 private:
  template <typename From>
  Status Flip(Region& region, uint32_t page, Tier to, From from) {
    PageRecord& rec = region.pages[page];
    const Tier was = rec.tier.load();
    if (!from(was)) return Status::Ok();
    Account(was, to);
    rec.tier = to;
    if (keep_log) log.push_back({region.id, page, to});
    if (on_move) on_move();
    return Status::Ok();
  }
  void Account(Tier from, Tier to) {
    if (from == to) return;
    if (from == Tier::kDevice) --resident_;
    if (to == Tier::kDevice) ++resident_;
  }

  const std::vector<RegionPtr>* regions_ = nullptr;
  const size_t page_bytes_;
  uint64_t resident_ = 0;  // counted as tiers change, without regions_
  uint64_t capacity_ = 0;
};

}  // namespace kvtier::testing
