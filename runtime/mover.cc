// MovePage (see mover.h).
#include "runtime/mover.h"

namespace kvtier {

MoveOutcome MovePage(Device& device, Region& region, const Move& move, uint32_t now_tick,
                     Status* error) {
  if (move.page >= region.pages.size()) return MoveOutcome::kFailed;
  PageRecord& rec = region.pages[move.page];
  if (rec.tier.load(std::memory_order_relaxed) == move.to) return MoveOutcome::kAlreadyThere;
  Status st;
  switch (move.to) {
    case Tier::kDevice:
      st = device.Promote(region, move.page);
      rec.flags.fetch_and(static_cast<uint8_t>(~kPageWillNeed), std::memory_order_relaxed);
      break;
    case Tier::kHost:
      st = device.Demote(region, move.page);
      break;
    case Tier::kDisk:
      st = device.Spill(region, move.page);
      break;
    case Tier::kUntouched:
      st = Status::Error("a page cannot be moved to the untouched state");
      break;
  }
  if (!st.ok()) {
    if (error) *error = st;
    return MoveOutcome::kFailed;
  }
  rec.last_move = now_tick;
  return MoveOutcome::kMoved;
}

}  // namespace kvtier
