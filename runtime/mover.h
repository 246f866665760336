// Mover: carries out a tick's decisions through a device backend.
//
// Moves travel on three channels: up (host or disk -> device), down
// (device -> host) and spill (host -> disk). Each channel earns its
// bandwidth x the link share (KVTIER_LINK_SHARE) as time passes, up to one
// tick's worth, and moves spend it, so a full-duplex link is used in both
// directions at once and the engine keeps what the operator leaves it.
// Demand promotions (and the demotions that make their room) may borrow up
// to demand_burst_ticks ahead: a returning session's KV then goes out as
// one bulk transfer instead of a tick's worth at a time while the engine
// faults on the rest; later moves wait until the debt is repaid, so the
// rate never exceeds the link. A channel whose bandwidth is unknown (0: a
// synchronous backend such as the simulated GPU, where a move's call
// returns when the bytes have moved) has no byte budget; there the deadline
// bounds a tick: moves stop after two tick periods of wall time, so faults
// and pressure are never left unseen for long. KVTIER_MOVE_BYTES_PER_TICK,
// when set, caps all channels together per tick.
//
// Order: demand promotions, then predicted prefetches, then demotions, then
// spills (MoveClass); a kRoom demotion goes with the promotion after it.
// While the host tier is over its budget, spills go right after the demand
// promotions: a swap's room may take the host past its budget, and the
// spills that bring it back must not wait behind prefetches for a deadline
// that cuts them (the host backend's budget is the engine's memory).
// Moves that do not fit this tick's budgets or deadline wait in a backlog
// and go ahead of newer moves of their class next tick; a newer decision for
// the same page replaces a waiting one. Nothing a policy decided is dropped
// unless its region is gone, its page is already there, or the backlog
// overflows (counted). Runs of spills go to the device as one group, so
// their writes are in flight together, sized by the measured spill speed to
// end near the deadline.
//
// MovePage and SpillPages are the only places a Move becomes a device call.
// Thread-safety: one thread at a time (the policy thread); the device's
// methods are safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <unordered_map>
#include <vector>

#include "runtime/clock.h"
#include "runtime/device/device.h"
#include "runtime/policy.h"

namespace kvtier {

enum class MoveOutcome { kMoved, kAlreadyThere, kFailed };

// Moves `move.page` of `region` to `move.to`. On success stamps last_move
// with `now_tick`; a promotion clears the page's WILL_NEED hint. `error`
// (optional) receives the device's message on failure.
MoveOutcome MovePage(Device& device, Region& region, const Move& move, uint32_t now_tick,
                     Status* error = nullptr);

// Spills per SpillPages call (fewer when the tick's deadline is near): twice
// the store's queue depth, so the pipeline runs full for half of a group (32
// measured no faster on the simulated GPU, whose spills also punch each page
// under its lock).
constexpr size_t kSpillGroupPages = 16;
// Demotions per DemotePages call: a backend unmaps neighbours among them
// together.
constexpr size_t kDemoteGroupPages = 64;

// Moves every page of `pages` to the disk tier in one device call, so their
// writes are in flight together. outcomes[i] and errors[i] are what MovePage
// would give for pages[i] (the spans have one size).
void SpillPages(Device& device, std::span<const PageRef> pages, uint32_t now_tick,
                std::span<MoveOutcome> outcomes, std::span<Status> errors);

enum Channel : uint8_t { kChannelUp = 0, kChannelDown = 1, kChannelSpill = 2 };
constexpr int kChannelCount = 3;
// The channel a move to `to` travels on.
Channel ChannelTo(Tier to);
// The class the mover orders `m` by (kDefault resolved by destination).
MoveClass ClassOf(const Move& m);

struct MoverConfig {
  uint64_t tick_ns = 10'000'000;
  // Bytes per second of each channel (indexed by Channel); 0: unknown.
  double bps[kChannelCount] = {0, 0, 0};
  uint32_t share_pct = 100;         // of each channel's bandwidth per tick
  uint64_t cap_bytes = 0;           // all channels together per tick; 0: no cap
  uint64_t deadline_ns = 0;         // stop issuing after this long; 0: two tick periods
  size_t backlog_limit = 1 << 16;   // moves kept waiting at most
  uint32_t demand_burst_ticks = 4;  // ticks of budget demand may borrow
};

struct MoveReport {
  uint64_t bytes[kChannelCount] = {0, 0, 0};  // moved, per channel
  uint64_t moves = 0;
  uint64_t failed = 0;    // refused by the device
  uint64_t deferred = 0;  // left in the backlog for a later tick
  uint64_t dropped = 0;   // backlog overflow
};

class Mover {
 public:
  // Told of each move the device refused (the region may be gone).
  using FailureFn = std::function<void(Region& region, const Move& move, const Status& error)>;

  Mover(Device& device, const Clock& clock, const MoverConfig& config);

  void set_on_failure(FailureFn fn) { on_failure_ = std::move(fn); }
  const MoverConfig& config() const { return config_; }

  // What a policy may still plan this tick: each channel's earned budget
  // less the bytes waiting in the backlog for it (demand_up: with what
  // demand may borrow). Brings the channels' earnings up to now.
  MoveBudget Budget();
  // Executes the backlog and `decisions` (see top). `find` maps a region id
  // to the live region, or null.
  MoveReport Execute(const Decisions& decisions, const std::function<Region*(RegionId)>& find,
                     uint32_t tick, bool host_over_budget = false);
  size_t backlog_size() const { return backlog_.size(); }

 private:
  // A promotion or demotion with the kRoom demotions that make room for it.
  struct Unit {
    std::vector<Move> room;
    Move move;
    MoveClass cls = MoveClass::kDefault;
    uint64_t need[kChannelCount] = {0, 0, 0};  // bytes per channel
    bool alive = true;
  };
  // Bytes a channel earns per tick; MoveBudget::kUnlimited if unknown.
  uint64_t ChannelBudget(int channel) const;
  void Earn();
  // Fills u.need from the live regions; false when the unit's region is gone.
  static bool Size(Unit& u, const std::function<Region*(RegionId)>& find);
  void Defer(Unit&& u);

  Device& device_;
  const Clock& clock_;
  const MoverConfig config_;
  FailureFn on_failure_;
  std::vector<Unit> backlog_;
  uint64_t backlog_bytes_[kChannelCount] = {0, 0, 0};
  // Earned and not spent, per channel (negative: borrowed by demand).
  double tokens_[kChannelCount] = {0, 0, 0};
  uint64_t earned_at_ = 0;
  bool earned_once_ = false;
  // Recent spill time per byte (0: none yet), so a group of spills is sized
  // to end near the deadline on slow disks too.
  double spill_ns_per_byte_ = 0;
};

}  // namespace kvtier
