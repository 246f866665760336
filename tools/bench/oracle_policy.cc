// OraclePolicy: Belady plus perfect prefetch (see oracle_policy.h).
#include "tools/bench/oracle_policy.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

namespace kvtier::bench {
namespace {

constexpr uint32_t kReplanTicks = 50;  // also replan this often: residency drifts

std::vector<Region*> Layers(const PolicyView& view) {
  std::vector<Region*> layers;
  for (const RegionPtr& r : *view.regions) layers.push_back(r.get());
  std::sort(layers.begin(), layers.end(), [](Region* a, Region* b) { return a->id < b->id; });
  return layers;
}

bool Movable(const PageRecord& rec) {
  return !(rec.flags.load(std::memory_order_relaxed) & (kPagePinned | kPageInFlight));
}

}  // namespace

void OraclePolicy::Replan(const PolicyView& view) {
  const double now_s = (view.now - 1) * (tick_ns_ / 1e9);
  std::vector<OracleSession> sessions;
  future_->Sessions(now_s, &sessions);
  std::stable_sort(sessions.begin(), sessions.end(),
                   [](const auto& a, const auto& b) { return a.next_use_s < b.next_use_s; });
  // Each offset's next use is the soonest of the sessions holding KV in it.
  std::vector<uint32_t> order;
  std::vector<bool> never;
  std::unordered_set<uint32_t> seen;
  for (const OracleSession& s : sessions) {
    for (uint32_t p : s.pages) {
      if (seen.insert(p).second) {
        order.push_back(p);
        never.push_back(std::isinf(s.next_use_s));
      }
    }
  }
  const std::vector<Region*> layers = Layers(view);
  const uint64_t offset_bytes =
      layers.empty() ? 1 : layers.size() * uint64_t{layers.front()->page_size};
  const size_t capacity = view.device().high / offset_bytes;
  want_.clear();
  drop_.clear();
  keep_.clear();
  for (size_t i = 0; i < order.size(); ++i) {
    if (i < capacity && !never[i]) {
      want_.push_back(order[i]);
      keep_.insert(order[i]);
    } else {
      drop_.push_back(order[i]);
    }
  }
  std::reverse(drop_.begin(), drop_.end());
  want_cursor_ = drop_cursor_ = drop_layer_ = 0;
  planned_epoch_ = future_->epoch();
  planned_tick_ = view.now;
}

bool OraclePolicy::NextVictim(const std::vector<Region*>& layers, Region** region, uint32_t* page) {
  while (drop_cursor_ < drop_.size()) {
    const uint32_t p = drop_[drop_cursor_];
    while (drop_layer_ < layers.size()) {
      Region* r = layers[drop_layer_++];
      if (p >= r->pages.size()) continue;
      const PageRecord& rec = r->pages[p];
      if (rec.tier.load(std::memory_order_relaxed) == Tier::kDevice && Movable(rec)) {
        *region = r;
        *page = p;
        return true;
      }
    }
    ++drop_cursor_;
    drop_layer_ = 0;
  }
  return false;
}

void OraclePolicy::Decide(const PolicyView& view, Decisions* out) {
  if (future_->epoch() != planned_epoch_ || view.now - planned_tick_ >= kReplanTicks) {
    Replan(view);
  }
  const std::vector<Region*> layers = Layers(view);
  if (layers.empty()) return;
  const double tick_s = tick_ns_ / 1e9;
  uint64_t up_budget = static_cast<uint64_t>(h2d_bps_ * tick_s);
  uint64_t down_budget = static_cast<uint64_t>(d2h_bps_ * tick_s);
  const TierUsage& dev = view.device();
  int64_t room = static_cast<int64_t>(dev.high) - static_cast<int64_t>(dev.used);

  std::vector<Move> demotions, promotions;
  auto demote_one = [&]() {
    Region* r;
    uint32_t p;
    if (down_budget < layers.front()->page_size || !NextVictim(layers, &r, &p)) return false;
    demotions.push_back({r->id, p, Tier::kHost});
    room += r->page_size;
    down_budget -= r->page_size;
    return true;
  };
  // Over the watermark (new KV written): make room first.
  while (room < 0 && demote_one()) {
  }
  // Prefetch the wanted offsets, soonest first.
  bool all_resident_so_far = true;
  for (size_t i = want_cursor_; i < want_.size() && up_budget >= layers.front()->page_size; ++i) {
    const uint32_t p = want_[i];
    bool resident = true;
    for (Region* r : layers) {
      if (p >= r->pages.size()) continue;
      const PageRecord& rec = r->pages[p];
      const Tier t = rec.tier.load(std::memory_order_relaxed);
      if (t == Tier::kDevice || t == Tier::kUntouched) continue;
      resident = false;
      if (!Movable(rec) || up_budget < r->page_size) continue;
      if (room < static_cast<int64_t>(r->page_size) && !demote_one()) break;
      promotions.push_back({r->id, p, Tier::kDevice});
      room -= r->page_size;
      up_budget -= r->page_size;
    }
    if (resident && all_resident_so_far) want_cursor_ = i + 1;
    all_resident_so_far = all_resident_so_far && resident;
    if (room <= 0 && drop_cursor_ >= drop_.size()) break;
  }
  out->moves.insert(out->moves.end(), demotions.begin(), demotions.end());
  out->moves.insert(out->moves.end(), promotions.begin(), promotions.end());
}

}  // namespace kvtier::bench
