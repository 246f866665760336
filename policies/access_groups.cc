// AccessGroups (see access_groups.h).
#include "policies/access_groups.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

namespace kvtier {

void AccessGroups::OnEvidence(const Region& first, uint32_t offset, bool first_touch) {
  pending_.push_back({&first, offset, first_touch});
}

GroupId AccessGroups::GroupOf(uint64_t slot) const {
  auto it = group_of_.find(slot);
  return it == group_of_.end() ? kNoGroup : it->second.group;
}

GroupId AccessGroups::NewGroup() {
  GroupId id;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
    groups_[id] = AccessGroup{};
  } else {
    id = static_cast<GroupId>(groups_.size());
    groups_.emplace_back();
  }
  return id;
}

void AccessGroups::Assign(uint64_t slot, GroupId to) {
  Slot& s = group_of_[slot];
  groups_[to].latest = slot;
  if (s.group == to) return;
  if (s.group != kNoGroup) {
    AccessGroup& old = groups_[s.group];
    if (old.live > 0 && --old.live == 0) {
      std::erase_if(samples_, [g = s.group](const Sample& x) { return x.group == g; });
      next_sample_ = samples_.empty() ? 0 : next_sample_ % samples_.size();
      if (s.group == shared_) shared_ = kNoGroup;
      if (s.group == writer_) writer_ = kNoGroup;
      old = AccessGroup{};
      freed_.push_back(s.group);  // reused once the caller took it (TakeFreed)
    }
  }
  s.group = to;
  AccessGroup& g = groups_[to];
  if (!g.slots.empty() && slot < g.slots.back()) g.sorted = false;
  g.slots.push_back(slot);
  ++g.live;
}

void AccessGroups::Compact(GroupId id) {
  AccessGroup& g = groups_[id];
  std::erase_if(g.slots, [&](uint64_t key) { return GroupOf(key) != id; });
  if (!g.sorted) std::sort(g.slots.begin(), g.slots.end());
  g.slots.erase(std::unique(g.slots.begin(), g.slots.end()), g.slots.end());
  g.sorted = true;
  g.live = static_cast<uint32_t>(g.slots.size());
}

std::vector<GroupId> AccessGroups::TakeFreed() {
  // Only now may NewGroup hand the ids out again: the caller drops what it
  // kept for them first, and must never drop it for a new group's id.
  std::vector<GroupId> out;
  out.swap(freed_);
  free_.insert(free_.end(), out.begin(), out.end());
  return out;
}

bool AccessGroups::Regular() const {
  return samples_.size() >= 3 && population_spread_ < options_.trust_spread * population_interval_;
}

void AccessGroups::RecordVisit(GroupId id, uint32_t start) {
  AccessGroup& g = groups_[id];
  const uint32_t previous = g.visit;
  g.prev_visit = previous;
  g.visit = start;
  ++g.visits;
  if (previous == 0 || start <= previous) return;
  double sample = start - previous;
  // About k of its own steady intervals since the last visit seen: k
  // returns, k-1 of them unseen (a resident group's use is invisible).
  if (g.intervals >= 2 && g.spread < options_.trust_spread * g.interval) {
    const double k = std::round(sample / g.interval);
    if (k >= 2 && std::fabs(sample - k * g.interval) < options_.trust_spread * g.interval) {
      sample /= k;
    }
  }
  const double a = options_.alpha;
  if (g.interval == 0) {
    g.interval = sample;
    g.spread = sample / 2;  // pessimistic until a second interval agrees
  } else {
    g.spread = (1 - a) * g.spread + a * std::fabs(sample - g.interval);
    g.interval = (1 - a) * g.interval + a * sample;
  }
  ++g.intervals;
  if (id == shared_) return;  // every session's: it says nothing of a session's return

  // One vote per group: its latest estimate replaces its earlier one.
  auto mine = std::find_if(samples_.begin(), samples_.end(),
                           [id](const Sample& x) { return x.group == id; });
  if (mine != samples_.end()) {
    mine->interval = g.interval;
  } else if (samples_.size() < kSamples) {
    samples_.push_back({id, g.interval});
  } else {
    samples_[next_sample_] = {id, g.interval};
    next_sample_ = (next_sample_ + 1) % kSamples;
  }
  std::vector<double> v;
  for (const Sample& x : samples_) v.push_back(x.interval);
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  const double median = v[v.size() / 2];
  for (double& x : v) x = std::fabs(x - median);
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  population_spread_ = v[v.size() / 2];
  if (std::fabs(median - population_interval_) > 0.05 * median) ++population_version_;
  population_interval_ = median;
}

void AccessGroups::EndTick(uint32_t now, std::vector<EpisodeVisit>* visits) {
  visits->clear();
  touched_.clear();
  written_ = kNoGroup;
  Episode& e = episode_;
  const bool over = e.open && (now - e.last > options_.episode_gap_ticks ||
                               (!pending_.empty() && now - e.start > options_.episode_max_ticks));
  if (over) Close(now, visits);
  if (pending_.empty()) return;
  if (!e.open) {
    e = Episode{};
    e.open = true;
    e.start = now;
  }
  e.last = now;
  for (const Evidence& p : pending_) {
    const uint64_t key = PageKey(p.first->id, p.offset);
    const GroupId g = GroupOf(key);
    if (g == kNoGroup) {  // new KV, or a slot the runtime had not seen
      e.first_touches.push_back(key);
      continue;
    }
    AccessGroup& group = groups_[g];
    group.latest = key;
    if (std::find(touched_.begin(), touched_.end(), g) == touched_.end()) touched_.push_back(g);
    // Idle before this episode: its evidence here starts a visit.
    if (group.visits == 0 || now - group.last_active > options_.visit_gap_ticks) {
      if (std::find(e.idle.begin(), e.idle.end(), g) == e.idle.end()) {
        e.idle.push_back(g);
        group.idle_since = group.last_active;
      }
    }
    group.last_active = now;
    if (p.first_touch) {  // another layer of a block being written: in use
      if (g == writer_) writer_last_ = now;
      continue;
    }
    if (!e.seen.insert(key).second) continue;  // another layer of a slot already counted
    if (group.marker == key) e.marked.push_back(g);
    ++e.faults[g];
    e.faulted.push_back(key);
  }
  pending_.clear();
}

void AccessGroups::Close(uint32_t now, std::vector<EpisodeVisit>* visits) {
  Episode e = std::move(episode_);
  episode_ = Episode{};
  // The groups that visit: a quarter of their slots, or their marker.
  auto idle = [&](GroupId g) { return std::find(e.idle.begin(), e.idle.end(), g) != e.idle.end(); };
  std::vector<GroupId> present;
  for (const auto& [g, n] : e.faults) {
    if (!Alive(g)) continue;
    const bool marked = std::find(e.marked.begin(), e.marked.end(), g) != e.marked.end();
    if (!marked && g != shared_ && uint64_t{n} * 4 < groups_[g].live) continue;
    present.push_back(g);
    if (idle(g)) visits->push_back({g, n});  // else still in use: no new visit
  }
  std::sort(visits->begin(), visits->end(), [&](const EpisodeVisit& a, const EpisodeVisit& b) {
    if (groups_[a.group].live != groups_[b.group].live) {
      return groups_[a.group].live > groups_[b.group].live;
    }
    return a.group < b.group;
  });
  GroupId owner = kNoGroup;
  for (const EpisodeVisit& v : *visits) {
    if (v.group != shared_) {
      owner = v.group;
      break;
    }
  }
  // Groups that come back together are one: a session written in pieces.
  // (Two sessions returning in one episode are split apart again when only
  // one of them next returns, see Split.) A group present by its marker
  // alone is a visit of its own (a session served from the device while
  // another came back), never a piece of the owner.
  auto came_back = [&](GroupId g) { return uint64_t{e.faults[g]} * 4 >= groups_[g].live; };
  if (owner != kNoGroup && came_back(owner)) {
    uint32_t faulted = e.faults[owner];
    for (GroupId g : present) {
      if (g == owner || g == shared_ || !idle(g) || !came_back(g)) continue;
      faulted += e.faults[g];
      for (uint64_t key : std::vector<uint64_t>(groups_[g].slots)) {
        if (GroupOf(key) == g) Assign(key, owner);
      }
    }
    std::erase_if(*visits, [&](const EpisodeVisit& v) { return !Alive(v.group); });
    for (EpisodeVisit& v : *visits) {
      if (v.group == owner) v.faulted = faulted;
    }
  }
  // A present group brings its slots; from a group of which only a few
  // slots faulted (another session's blocks in it, or a group written all at
  // once, such as a pool zero-filled at start), the faulting ones leave.
  auto stays = [&](GroupId g) {
    return std::find(present.begin(), present.end(), g) != present.end();
  };
  // Faulting slots of groups that are not present follow the episode's
  // owner, else form a group of their own: a session coming back whose
  // blocks sat in another group. A slot that keeps moving beside another
  // session's return is shared. A move that is most of the episode is not
  // counted: that is the session itself leaving a group it never was alone
  // (a pool written all at once, sessions prefilled together).
  GroupId target = owner;
  std::unordered_map<GroupId, size_t> leaving;
  for (uint64_t key : e.faulted) {
    const GroupId g = GroupOf(key);
    if (g != kNoGroup && !stays(g) && g != target) ++leaving[g];
  }
  for (uint64_t key : e.faulted) {
    const GroupId g = GroupOf(key);
    if (g == kNoGroup || stays(g) || g == target) continue;
    Slot& s = group_of_[key];
    const bool counted = leaving[g] * 2 < e.faulted.size();
    if (counted && s.moves >= 1) {
      if (shared_ == kNoGroup) {
        shared_ = NewGroup();
        groups_[shared_].last_active = now;
      }
      Assign(key, shared_);
      continue;
    }
    if (target == kNoGroup) target = NewGroup();
    if (counted) s.moves = 1;
    Assign(key, target);
  }
  // First touches: the episode's group, else the session being written (the
  // group that owned an episode or took first touches last, within
  // writer_ticks) if they are a trickle of new blocks (a decode) or it is
  // still being prefilled (after its decode, a burst is the next session's
  // prompt), else a new group's.
  const bool burst = e.first_touches.size() > kTrickleSlots;
  if (target == kNoGroup && Alive(writer_) && now - writer_last_ <= options_.writer_ticks &&
      (!burst || writer_prefilling_)) {
    target = writer_;
  }
  for (uint64_t key : e.first_touches) {
    if (GroupOf(key) != kNoGroup) continue;
    if (target == kNoGroup) target = NewGroup();
    Assign(key, target);
    written_ = target;
  }
  if (owner != kNoGroup) {
    writer_ = owner;
    writer_last_ = now;
    writer_prefilling_ = burst;
  }
  if (!e.first_touches.empty() && target != kNoGroup) {
    writer_ = target;
    writer_last_ = now;
    writer_prefilling_ = burst;
  }
  if (target != kNoGroup && target != owner) {
    AccessGroup& t = groups_[target];
    t.last_active = std::max(t.last_active, e.last);
    if (t.visits == 0) {  // a new group: its first visit is its creation
      RecordVisit(target, e.start);
      visits->push_back({target, 0});
    }
  }
  for (const EpisodeVisit& v : *visits) {
    if (groups_[v.group].visit != e.start) RecordVisit(v.group, e.start);
  }
}

void AccessGroups::ForgetIntervals(GroupId id) {
  AccessGroup& g = groups_[id];
  g.interval = g.spread = 0;
  g.intervals = 0;
  std::erase_if(samples_, [id](const Sample& x) { return x.group == id; });
  next_sample_ = samples_.empty() ? 0 : next_sample_ % samples_.size();
}

bool AccessGroups::PredictNext(const AccessGroup& g, uint32_t now, uint32_t* next) const {
  const double interval = g.interval > 0 ? g.interval : population_interval_;
  if (interval <= 0 || g.visit == 0) return false;
  double n = g.visit + interval;
  const double slack = Slack(g);
  if (n + slack < now) n += std::ceil((now - slack - n) / interval) * interval;
  *next = static_cast<uint32_t>(std::min(n, 4e9));
  return true;
}

bool AccessGroups::Trusted(const AccessGroup& g) const {
  if (g.visit == 0) return false;
  const double t = options_.trust_spread;
  if (g.intervals >= 2 && g.spread < t * g.interval) return true;
  if (!Regular()) return false;
  if (g.intervals == 0) return true;  // one visit: the population's interval
  return std::fabs(g.interval - population_interval_) < t * population_interval_;
}

uint32_t AccessGroups::Slack(const AccessGroup& g) const {
  const bool own = g.intervals >= 2 && g.spread < options_.trust_spread * g.interval;
  double interval = g.interval > 0 ? g.interval : population_interval_;
  double spread = g.interval > 0 ? g.spread : population_spread_;
  if (!own && Regular()) {  // one interval so far: the population's spread says more
    interval = population_interval_;
    spread = population_spread_;
  }
  return static_cast<uint32_t>(std::max(2 * spread, 0.1 * interval));
}

}  // namespace kvtier
