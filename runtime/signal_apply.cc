// ApplySignal and DecayedHeat (see signal_apply.h).
#include "runtime/signal_apply.h"

#include <algorithm>

namespace kvtier {
namespace {

void Access(PageRecord& rec, uint32_t now) {
  rec.heat = std::min(DecayedHeat(rec, now) + kHeatStep, kHeatMax);
  rec.last_access = now;
}

}  // namespace

uint32_t DecayedHeat(const PageRecord& rec, uint32_t now_tick) {
  uint32_t age = now_tick > rec.last_access ? now_tick - rec.last_access : 0;
  uint32_t halvings = age / kHeatDecayTicks;
  return halvings >= 32 ? 0 : rec.heat >> halvings;
}

void ApplySignal(Region& region, const Signal& s, uint32_t now_tick, SignalEffects* effects) {
  if (s.kind == SignalKind::kLaunch) return;
  const uint64_t size = region.pages.size();
  if (s.page >= size) return;
  const uint32_t end = static_cast<uint32_t>(std::min<uint64_t>(uint64_t{s.page} + s.pages, size));
  for (uint32_t p = s.page; p < end; ++p) {
    PageRecord& rec = region.pages[p];
    switch (s.kind) {
      case SignalKind::kFault: {
        bool was_away = s.from == Tier::kHost || s.from == Tier::kDisk;
        if (was_away && rec.last_move != 0 && now_tick - rec.last_move < kRefaultWindowTicks) {
          if (rec.refaults < UINT16_MAX) ++rec.refaults;
          if (effects) ++effects->refaults;
        }
        rec.last_move = now_tick;
        Access(rec, now_tick);
        break;
      }
      case SignalKind::kAccess:
        Access(rec, now_tick);
        break;
      case SignalKind::kWillNeed:
        // Recent, not more frequent: a scheduler that hints every step would
        // otherwise make its running requests' pages look like the hottest.
        rec.flags.fetch_or(kPageWillNeed, std::memory_order_relaxed);
        rec.heat = DecayedHeat(rec, now_tick);
        rec.last_access = now_tick;
        break;
      case SignalKind::kCold:
        rec.flags.fetch_and(static_cast<uint8_t>(~kPageWillNeed), std::memory_order_relaxed);
        rec.heat = 0;
        rec.last_access = 0;
        break;
      case SignalKind::kPin:
        rec.flags.fetch_or(kPagePinned, std::memory_order_relaxed);
        break;
      case SignalKind::kUnpin:
        rec.flags.fetch_and(static_cast<uint8_t>(~kPagePinned), std::memory_order_relaxed);
        break;
      case SignalKind::kLaunch:
      case SignalKind::kEvicted:  // the device moved it; last_move is the device's
        break;
    }
  }
}

}  // namespace kvtier
