// MovePage and SpillPages: carry out policy decisions through a device
// backend.
//
// The only places a Move becomes a device call (Promote, Demote, Spill or a
// group of spills), so the runtime's tick and the benchmark's model-only
// tick book moves the same way (the runtime groups runs of spills; the
// model device, whose spills cost what its profile says whatever the
// grouping, takes them one at a time). Thread-safety: as the device's
// methods; the caller owns the page records' last_move (the policy thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "runtime/device/device.h"
#include "runtime/policy.h"

namespace kvtier {

enum class MoveOutcome { kMoved, kAlreadyThere, kFailed };

// Moves `move.page` of `region` to `move.to`. On success stamps last_move
// with `now_tick`; a promotion clears the page's WILL_NEED hint. `error`
// (optional) receives the device's message on failure.
MoveOutcome MovePage(Device& device, Region& region, const Move& move, uint32_t now_tick,
                     Status* error = nullptr);

// Spills per SpillPages call from the policy tick (fewer when the tick's
// deadline is near): twice the store's queue depth, so the pipeline runs
// full for half of a group (32 measured no faster on the simulated GPU,
// whose spills also punch each page under its lock).
constexpr size_t kSpillGroupPages = 16;

// Moves every page of `pages` to the disk tier in one device call, so their
// writes are in flight together. outcomes[i] and errors[i] are what MovePage
// would give for pages[i] (the spans have one size).
void SpillPages(Device& device, std::span<const PageRef> pages, uint32_t now_tick,
                std::span<MoveOutcome> outcomes, std::span<Status> errors);

}  // namespace kvtier
