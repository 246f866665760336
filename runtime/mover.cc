// MovePage, SpillPages and the Mover (see mover.h).
#include "runtime/mover.h"

#include <algorithm>

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
    PageRecord& rec = todo[j].region->pages[todo[j].page];
    rec.last_move = now_tick;
    // A page of zeros the device dropped instead of writing (it is
    // untouched again) cost no I/O: it is left out of the spill budget and
    // of the disk's measured rate.
    outcomes[i] = rec.tier.load(std::memory_order_relaxed) == Tier::kUntouched
                      ? MoveOutcome::kAlreadyThere
                      : MoveOutcome::kMoved;
  }
}

Channel ChannelTo(Tier to) {
  switch (to) {
    case Tier::kHost:
      return kChannelDown;
    case Tier::kDisk:
      return kChannelSpill;
    default:
      return kChannelUp;
  }
}

MoveClass ClassOf(const Move& m) {
  if (m.why != MoveClass::kDefault) return m.why;
  switch (m.to) {
    case Tier::kHost:
      return MoveClass::kDemote;
    case Tier::kDisk:
      return MoveClass::kSpill;
    default:
      return MoveClass::kPrefetch;
  }
}

namespace {

uint64_t Key(const Move& m) { return (uint64_t{m.region} << 32) | m.page; }

}  // namespace

Mover::Mover(Device& device, const Clock& clock, const MoverConfig& config)
    : device_(device), clock_(clock), config_(config) {}

uint64_t Mover::ChannelBudget(int channel) const {
  const double bps = config_.bps[channel];
  if (bps <= 0) return MoveBudget::kUnlimited;
  const double bytes = bps * static_cast<double>(config_.tick_ns) / 1e9 *
                       static_cast<double>(config_.share_pct) / 100.0;
  return static_cast<uint64_t>(bytes);
}

void Mover::Earn() {
  const uint64_t now = clock_.NowNs();
  // The first tick starts with one tick's worth.
  const uint64_t dt = earned_once_ ? now - std::min(now, earned_at_) : config_.tick_ns;
  earned_once_ = true;
  earned_at_ = now;
  for (int c = 0; c < kChannelCount; ++c) {
    const uint64_t per_tick = ChannelBudget(c);
    if (per_tick == MoveBudget::kUnlimited) continue;
    const double earned = static_cast<double>(per_tick) * static_cast<double>(dt) /
                          static_cast<double>(std::max<uint64_t>(config_.tick_ns, 1));
    tokens_[c] = std::min(tokens_[c] + earned, static_cast<double>(per_tick));
  }
}

MoveBudget Mover::Budget() {
  Earn();
  uint64_t left[kChannelCount], demand[kChannelCount];
  uint64_t waiting = 0;
  for (int c = 0; c < kChannelCount; ++c) {
    const uint64_t per_tick = ChannelBudget(c);
    waiting += backlog_bytes_[c];
    if (per_tick == MoveBudget::kUnlimited) {
      left[c] = demand[c] = MoveBudget::kUnlimited;
      continue;
    }
    const double have = tokens_[c] - static_cast<double>(backlog_bytes_[c]);
    const double borrow = static_cast<double>(per_tick) * config_.demand_burst_ticks;
    left[c] = have > 0 ? static_cast<uint64_t>(have) : 0;
    demand[c] = have + borrow > 0 ? static_cast<uint64_t>(have + borrow) : 0;
  }
  if (config_.cap_bytes) {
    const uint64_t total = config_.cap_bytes - std::min(config_.cap_bytes, waiting);
    for (int c = 0; c < kChannelCount; ++c) {
      left[c] = std::min(left[c], total);
      demand[c] = std::min(demand[c], total);
    }
  }
  MoveBudget b;
  b.up = left[kChannelUp];
  b.down = left[kChannelDown];
  b.spill = left[kChannelSpill];
  b.demand_up = demand[kChannelUp];
  b.demand_down = demand[kChannelDown];
  return b;
}

bool Mover::Size(Unit& u, const std::function<Region*(RegionId)>& find) {
  for (uint64_t& n : u.need) n = 0;
  Region* r = find(u.move.region);
  if (r == nullptr) return false;
  u.need[ChannelTo(u.move.to)] += r->page_size;
  for (const Move& m : u.room) {
    if (Region* rr = find(m.region)) u.need[kChannelDown] += rr->page_size;
  }
  return true;
}

void Mover::Defer(Unit&& u) {
  for (int c = 0; c < kChannelCount; ++c) backlog_bytes_[c] += u.need[c];
  backlog_.push_back(std::move(u));
}

MoveReport Mover::Execute(const Decisions& decisions, const std::function<Region*(RegionId)>& find,
                          uint32_t tick, bool host_over_budget) {
  MoveReport report;
  const uint64_t start = clock_.NowNs();
  const uint64_t deadline =
      start + (config_.deadline_ns ? config_.deadline_ns : 2 * config_.tick_ns);

  // The backlog first (older), then this tick's decisions.
  std::vector<Unit> units;
  units.swap(backlog_);
  for (uint64_t& b : backlog_bytes_) b = 0;
  std::vector<Move> room;
  for (const Move& m : decisions.moves) {
    if (m.why == MoveClass::kRoom && m.to == Tier::kHost) {
      room.push_back(m);
      continue;
    }
    Unit u;
    u.room.swap(room);
    u.move = m;
    u.cls = ClassOf(m);
    units.push_back(std::move(u));
  }
  for (const Move& m : room) {  // no promotion followed: plain demotions
    Unit u;
    u.move = m;
    u.move.why = MoveClass::kDemote;
    u.cls = MoveClass::kDemote;
    units.push_back(std::move(u));
  }
  // A newer decision for a page replaces an older one; gone regions drop out.
  std::unordered_map<uint64_t, size_t> latest;
  for (size_t i = 0; i < units.size(); ++i) {
    if (!Size(units[i], find)) {
      units[i].alive = false;
      continue;
    }
    auto [it, fresh] = latest.try_emplace(Key(units[i].move), i);
    if (!fresh) {
      units[it->second].alive = false;
      it->second = i;
    }
  }
  // Twice the class, so that spills can go between demand and prefetch.
  auto rank = [host_over_budget](MoveClass c) {
    const int r = 2 * static_cast<int>(c);
    return host_over_budget && c == MoveClass::kSpill ? 2 * static_cast<int>(MoveClass::kDemand) + 1
                                                      : r;
  };
  std::stable_sort(units.begin(), units.end(),
                   [&](const Unit& a, const Unit& b) { return rank(a.cls) < rank(b.cls); });

  Earn();
  uint64_t spent[kChannelCount] = {0, 0, 0};
  uint64_t spent_total = 0;
  auto affordable = [&](const Unit& u) {
    uint64_t total = 0;
    for (int c = 0; c < kChannelCount; ++c) {
      if (u.need[c] == 0) continue;
      total += u.need[c];
      const uint64_t per_tick = ChannelBudget(c);
      if (per_tick == MoveBudget::kUnlimited) continue;
      double allowance = tokens_[c] - static_cast<double>(spent[c]);
      if (u.cls == MoveClass::kDemand)
        allowance += static_cast<double>(per_tick) * config_.demand_burst_ticks;
      // A channel with anything earned takes one unit whatever its size,
      // so a budget smaller than a page still moves (and repays it later).
      const bool first = spent[c] == 0 && tokens_[c] > 0;
      if (!first && static_cast<double>(u.need[c]) > allowance) return false;
    }
    return !config_.cap_bytes || spent_total == 0 || spent_total + total <= config_.cap_bytes;
  };
  auto book = [&](Region& r, const Move& m, MoveOutcome outcome, const Status& st) {
    if (outcome == MoveOutcome::kAlreadyThere) return;
    if (outcome == MoveOutcome::kFailed) {
      ++report.failed;
      if (on_failure_) on_failure_(r, m, st);
      return;
    }
    const Channel c = ChannelTo(m.to);
    report.bytes[c] += r.page_size;
    spent[c] += r.page_size;
    spent_total += r.page_size;
    ++report.moves;
  };

  size_t i = 0;
  for (; i < units.size(); ++i) {
    Unit& u = units[i];
    if (!u.alive) continue;
    if (clock_.NowNs() > deadline) break;
    if (!affordable(u)) {
      Defer(std::move(u));
      continue;
    }
    if (u.cls == MoveClass::kDemote && u.room.empty() && u.move.to == Tier::kHost) {
      // A run of demotions goes to the device as one call, which may unmap
      // neighbouring pages together (one TLB shootdown a run, not a page).
      std::vector<Unit*> group;
      std::vector<PageRef> refs;
      for (size_t j = i;
           j < units.size() && units[j].cls == MoveClass::kDemote && units[j].room.empty() &&
           units[j].move.to == Tier::kHost && refs.size() < kDemoteGroupPages;
           ++j) {
        Unit& g = units[j];
        i = j;
        if (!g.alive) continue;
        if (!group.empty() && !affordable(g)) {
          Defer(std::move(g));
          g.alive = false;  // NOLINT(bugprone-use-after-move): marks the emptied slot
          continue;
        }
        Region* gr = find(g.move.region);
        if (gr == nullptr) {
          g.alive = false;
          continue;
        }
        const PageRecord& rec = gr->pages[g.move.page];
        if (rec.tier.load(std::memory_order_relaxed) == Tier::kHost) {
          g.alive = false;  // already there
          continue;
        }
        group.push_back(&g);
        refs.push_back({gr, g.move.page});
        // Booked as the group forms, so affordable() sees it.
        spent[kChannelDown] += gr->page_size;
        spent_total += gr->page_size;
      }
      for (const PageRef& ref : refs) {
        spent[kChannelDown] -= ref.region->page_size;
        spent_total -= ref.region->page_size;
      }
      std::vector<Status> results(refs.size());
      device_.DemotePages(refs, results);
      for (size_t k = 0; k < refs.size(); ++k) {
        Region& r = *refs[k].region;
        if (results[k].ok()) r.pages[refs[k].page].last_move = tick;
        book(r, group[k]->move, results[k].ok() ? MoveOutcome::kMoved : MoveOutcome::kFailed,
             results[k]);
        group[k]->alive = false;
      }
      continue;
    }
    if (u.cls != MoveClass::kSpill) {
      for (const Move& m : u.room) {
        Region* r = find(m.region);
        if (r == nullptr) continue;
        Status st;
        book(*r, m, MovePage(device_, *r, m, tick, &st), st);
      }
      Region* r = find(u.move.region);
      Status st;
      book(*r, u.move, MovePage(device_, *r, u.move, tick, &st), st);
      continue;
    }
    // A run of spills goes to the device as one group, so their writes are
    // in flight together; the group stays within the budgets and, once the
    // disk's speed is known, within what fits before the deadline.
    size_t most = kSpillGroupPages;
    if (spill_ns_per_byte_ > 0) {
      const double page_ns = spill_ns_per_byte_ * static_cast<double>(u.need[kChannelSpill]);
      const uint64_t now = clock_.NowNs();
      const double left_ns = static_cast<double>(deadline - std::min(deadline, now));
      most = std::clamp<size_t>(static_cast<size_t>(left_ns / page_ns), 1, kSpillGroupPages);
    }
    std::vector<Unit*> group;
    std::vector<PageRef> refs;
    uint64_t group_bytes = 0;
    for (size_t j = i; j < units.size() && units[j].cls == MoveClass::kSpill && refs.size() < most;
         ++j) {
      Unit& g = units[j];
      i = j;
      if (!g.alive) continue;
      spent[kChannelSpill] += group_bytes;  // afford the group as a whole
      spent_total += group_bytes;
      const bool fits = group.empty() || affordable(g);
      spent[kChannelSpill] -= group_bytes;
      spent_total -= group_bytes;
      if (!fits) {
        Defer(std::move(g));
        g.alive = false;  // NOLINT(bugprone-use-after-move): marks the emptied slot
        continue;
      }
      group.push_back(&g);
      refs.push_back({find(g.move.region), g.move.page});
      group_bytes += g.need[kChannelSpill];
    }
    std::vector<MoveOutcome> outcomes(refs.size());
    std::vector<Status> errors(refs.size());
    const uint64_t started = clock_.NowNs();
    SpillPages(device_, refs, tick, outcomes, errors);
    uint64_t spilled = 0;
    for (size_t k = 0; k < refs.size(); ++k) {
      if (outcomes[k] == MoveOutcome::kMoved) spilled += refs[k].region->page_size;
    }
    if (spilled > 0) {
      const double per_byte =
          static_cast<double>(clock_.NowNs() - started) / static_cast<double>(spilled);
      spill_ns_per_byte_ =
          spill_ns_per_byte_ > 0 ? 0.5 * spill_ns_per_byte_ + 0.5 * per_byte : per_byte;
    }
    for (size_t k = 0; k < refs.size(); ++k) {
      book(*refs[k].region, group[k]->move, outcomes[k], errors[k]);
      group[k]->alive = false;
    }
  }
  // Past the deadline: the rest waits for the next tick.
  for (; i < units.size(); ++i) {
    if (units[i].alive) Defer(std::move(units[i]));
  }
  for (int c = 0; c < kChannelCount; ++c) {
    if (ChannelBudget(c) != MoveBudget::kUnlimited) tokens_[c] -= static_cast<double>(spent[c]);
  }
  report.deferred = backlog_.size();
  if (backlog_.size() > config_.backlog_limit) {
    // The least urgent (the backlog is in class order) go.
    report.dropped = backlog_.size() - config_.backlog_limit;
    backlog_.resize(config_.backlog_limit);
    for (uint64_t& b : backlog_bytes_) b = 0;
    for (const Unit& u : backlog_) {
      for (int c = 0; c < kChannelCount; ++c) backlog_bytes_[c] += u.need[c];
    }
    report.deferred = backlog_.size();
  }
  return report;
}

}  // namespace kvtier
