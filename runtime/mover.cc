// MovePage (see mover.h).
#include "runtime/mover.h"

#include <vector>

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

void SpillPages(Device& device, std::span<const PageRef> pages, uint32_t now_tick,
                std::span<MoveOutcome> outcomes, std::span<Status> errors) {
  std::vector<PageRef> todo;
  std::vector<size_t> index;  // todo[j] is pages[index[j]]
  for (size_t i = 0; i < pages.size(); ++i) {
    const Region& r = *pages[i].region;
    errors[i] = Status::Ok();
    if (pages[i].page >= r.pages.size()) {
      outcomes[i] = MoveOutcome::kFailed;
    } else if (r.pages[pages[i].page].tier.load(std::memory_order_relaxed) == Tier::kDisk) {
      outcomes[i] = MoveOutcome::kAlreadyThere;
    } else {
      todo.push_back(pages[i]);
      index.push_back(i);
    }
  }
  if (todo.empty()) return;
  std::vector<Status> results(todo.size());
  device.SpillPages(todo, results);
  for (size_t j = 0; j < todo.size(); ++j) {
    const size_t i = index[j];
    if (!results[j].ok()) {
      outcomes[i] = MoveOutcome::kFailed;
      errors[i] = std::move(results[j]);
      continue;
    }
    todo[j].region->pages[todo[j].page].last_move = now_tick;
    outcomes[i] = MoveOutcome::kMoved;
  }
}

}  // namespace kvtier
