// MovePage: carries out one policy decision through a device backend.
//
// The one place a Move becomes a device call (Promote, Demote or Spill), so
// the runtime's tick and the benchmark's model-only tick move pages the same
// way. Thread-safety: as the device's methods; the caller owns the page
// record's last_move (the policy thread).
#pragma once

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

// Moves every page of `pages` to the disk tier in one device call, so their
// writes are in flight together. outcomes[i] and errors[i] are what MovePage
// would give for pages[i] (the spans have one size).
void SpillPages(Device& device, std::span<const PageRef> pages, uint32_t now_tick,
                std::span<MoveOutcome> outcomes, std::span<Status> errors);

}  // namespace kvtier
