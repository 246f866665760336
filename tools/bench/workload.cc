// The multi-round QA generator (see workload.h).
#include "tools/bench/workload.h"

#include <algorithm>
#include <cmath>

namespace kvtier::bench {

Workload::Workload(const WorkloadConfig& config) : config_(config) {
  gap_ = config_.num_users / config_.qps;
  const double session_length = gap_ * (config_.num_rounds - 1);
  gap_users_ = session_length / config_.num_users;
  warmup_ = config_.warmup_s < 0 ? gap_ : config_.warmup_s;
  end_tick_ = TickOf(warmup_ + config_.time_s);
  next_user_ = config_.init_user_id;
  // Ramp-up: session i is (num_users - i) join gaps into its conversation.
  const double ramp_up = config_.num_users * gap_users_;
  for (int i = 0; i < config_.num_users; ++i) {
    const double offset = ramp_up - i * gap_users_;
    if (offset < 0) break;
    const int passed = static_cast<int>(offset / gap_) + 1;
    CreateSession(passed, -offset + (passed - 1) * gap_);
  }
}

double Workload::ThinkTime(int user_id, int question_id) const {
  if (!config_.exponential_think_time) return gap_;
  // SplitMix64 of (seed, user, round): a uniform draw in (0, 1).
  uint64_t z = config_.seed * 0x9E3779B97F4A7C15ull + (uint64_t(uint32_t(user_id)) << 32) +
               uint32_t(question_id) + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  const double u = (static_cast<double>(z >> 11) + 0.5) / 9007199254740992.0;
  return -std::log(u) * gap_;
}

void Workload::CreateSession(int question_id, double last_launch) {
  Session s;
  s.user_id = next_user_++;
  s.question_id = question_id;
  s.last_launch = last_launch;
  s.gap = ThinkTime(s.user_id, question_id);
  s.started = last_launch > -kNever;
  sessions_.push_back(s);
  if (!Done(sessions_.back())) active_.push_back(static_cast<int>(sessions_.size()) - 1);
}

int64_t Workload::TickOf(double t) const {
  return static_cast<int64_t>(std::floor(t / kLoopTick + 1e-9));
}

bool Workload::Done(const Session& s) const {
  return s.question_id >= config_.num_rounds && !s.unfinished;
}

int64_t Workload::LaunchTick(const Session& s) const {
  if (s.unfinished || Done(s)) return kNeverTick;
  if (!s.started) return next_tick_;
  // The first tick t with t - last_launch > gap.
  return static_cast<int64_t>(std::floor((s.last_launch + s.gap) / kLoopTick + 1e-9)) + 1;
}

int64_t Workload::JoinTick() const {
  if (last_join_ == -kNever) return next_tick_;
  return static_cast<int64_t>(std::floor((last_join_ + gap_users_) / kLoopTick + 1e-9)) + 1;
}

double Workload::NextEventTime() const {
  int64_t tick = JoinTick();
  for (int i : active_) tick = std::min(tick, LaunchTick(sessions_[i]));
  tick = std::max(tick, next_tick_);
  if (tick > end_tick_) return kNever;
  return tick * kLoopTick;
}

void Workload::Advance(double t, std::vector<Launch>* out) {
  const int64_t until = std::min(TickOf(t), end_tick_);
  while (next_tick_ <= until) {
    double next = NextEventTime();
    if (next == kNever || TickOf(next) > until) break;
    StepAt(TickOf(next), out);
  }
  next_tick_ = std::max(next_tick_, until + 1);
}

void Workload::StepAt(int64_t tick, std::vector<Launch>* out) {
  const double now = tick * kLoopTick;
  if (JoinTick() <= tick &&
      (!config_.strict_concurrent_users || static_cast<int>(active_.size()) < config_.num_users)) {
    CreateSession(0, -kNever);
    last_join_ = now;
  }
  for (int i : active_) {
    Session& s = sessions_[i];
    const int64_t due = s.started ? LaunchTick(s) : tick;
    if (due > tick) continue;
    if (due < tick) ++late_;  // it was still waiting for its last answer
    Launch l;
    l.session = i;
    l.user_id = s.user_id;
    l.question_id = ++s.question_id;
    l.returning = s.context_tokens != 0;
    l.prompt_tokens = s.context_tokens == 0 ? config_.shared_system_prompt +
                                                  config_.user_history_prompt + config_.question_len
                                            : s.context_tokens + config_.question_len;
    l.answer_tokens = config_.answer_len;
    l.time_s = now;
    l.measured = now >= warmup_ - 1e-9 && now <= warmup_ + config_.time_s + 1e-9;
    s.started = true;
    s.unfinished = true;
    s.last_launch = now;
    s.gap = ThinkTime(s.user_id, s.question_id);
    s.context_tokens = l.prompt_tokens;  // the answer is added when it arrives
    out->push_back(l);
  }
  std::erase_if(active_, [&](int i) { return Done(sessions_[i]); });
  next_tick_ = tick + 1;
}

void Workload::OnFinish(int session, double t) {
  Session& s = sessions_[session];
  s.unfinished = false;
  s.context_tokens += config_.answer_len;
  // A user that fell behind launches on the loop tick after its answer.
  next_tick_ = std::max(next_tick_, TickOf(t) + 1);
  if (Done(s)) std::erase(active_, session);
}

double Workload::NextUse(int session, double now) const {
  const Session& s = sessions_[session];
  if (s.unfinished) return now;
  int64_t tick = LaunchTick(s);
  if (tick == kNeverTick) return kNever;
  tick = std::max(tick, next_tick_);  // a late user launches on the next loop tick
  if (tick > end_tick_) return kNever;
  return std::max(now, tick * kLoopTick);
}

}  // namespace kvtier::bench
