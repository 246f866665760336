// LMBenchmark's synthetic multi-round QA, as a generator on a virtual clock.
//
// Reproduces multi-round-qa.py: each user sends a request every
// num_users / qps seconds (never two at once: a late user waits for its
// answer and launches on the next 0.1 s loop tick); a session lasts
// num_rounds requests; a new user joins every session_length / num_users
// seconds, and at start a ramp-up creates num_users sessions at staggered
// points of their conversations (their first prompt carries no earlier
// answers, as in the script). With --think-time exp a user's gaps are
// exponential with the same mean instead (irregular returns). Round 1's
// prompt is the shared system prompt,
// the user's own history and a question; each later round appends the
// previous answer and a new question.
// Measurement: requests launched in [warmup, warmup + time] are measured.
// The warm-up is the start of the same trace (every user reaches its own
// earlier rounds only), not a separate pass that would pre-fill the caches of
// the measured users with their own prompts.
// Thread-safety: none.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

namespace kvtier::bench {

struct WorkloadConfig {
  int num_users = 15;
  int shared_system_prompt = 1000;
  int user_history_prompt = 20000;
  int answer_len = 100;
  int num_rounds = 20;
  double qps = 0.1;
  double time_s = 100;    // measured window (--time)
  double warmup_s = -1;   // unmeasured lead-in; < 0: one per-user gap
  int question_len = 20;  // tokens of a round's question
  int init_user_id = 0;
  bool strict_concurrent_users = false;  // --enforce-strict-concurrent-users
  // A user's think time before its next request: LMBenchmark's fixed gap
  // (num_users / qps), or exponential with that mean (--think-time exp),
  // drawn per user and round from `seed`, so every system sees one trace.
  bool exponential_think_time = false;
  uint64_t seed = 1;
};

struct Launch {
  int session = 0;
  int user_id = 0;
  int question_id = 0;
  int prompt_tokens = 0;
  int answer_tokens = 0;
  double time_s = 0;
  bool measured = false;
  // A returning request: the server answered this user before in this run,
  // so its conversation so far is in the KV the server kept (a user's first
  // request in the run, even one that joined at a later round, is not).
  bool returning = false;
};

class Workload {
 public:
  static constexpr double kNever = std::numeric_limits<double>::infinity();
  static constexpr double kLoopTick = 0.1;  // multi-round-qa.py's step interval

  explicit Workload(const WorkloadConfig& config);

  // Time of the next loop tick at which a user launches or joins; kNever when
  // none will (the launch window is over or every session is done).
  double NextEventTime() const;
  // Runs the loop ticks up to `t`; appends the requests launched.
  void Advance(double t, std::vector<Launch>* out);
  // The session's request finished at `t`.
  void OnFinish(int session, double t);
  // When the session will next read its KV: now while a request is pending,
  // its next launch otherwise, kNever once it has no rounds left.
  double NextUse(int session, double now) const;

  double gap_between_requests() const { return gap_; }
  double measure_start() const { return warmup_; }
  double measure_end() const { return warmup_ + config_.time_s; }
  int sessions() const { return static_cast<int>(sessions_.size()); }
  int64_t late_launches() const { return late_; }
  const WorkloadConfig& config() const { return config_; }

 private:
  struct Session {
    int user_id;
    int question_id = 0;
    double last_launch = -kNever;  // -kNever: never launched
    bool started = false;
    bool unfinished = false;
    int context_tokens = 0;  // prompt + answer of the last request; 0 = empty history
    double gap = 0;          // think time before its next request
  };
  // The think time after round `question_id` of `user_id`.
  double ThinkTime(int user_id, int question_id) const;
  int64_t TickOf(double t) const;
  // First loop tick at which `s` may launch (kNeverTick if it never will).
  int64_t LaunchTick(const Session& s) const;
  int64_t JoinTick() const;
  void StepAt(int64_t tick, std::vector<Launch>* out);
  bool Done(const Session& s) const;
  void CreateSession(int question_id, double last_launch);

  static constexpr int64_t kNeverTick = std::numeric_limits<int64_t>::max();
  const WorkloadConfig config_;
  double gap_ = 0;        // between one user's requests
  double gap_users_ = 0;  // between two joins
  double warmup_ = 0;
  int64_t end_tick_ = 0;   // no launch after this tick
  int64_t next_tick_ = 0;  // next tick to examine
  double last_join_ = -kNever;
  int next_user_ = 0;
  int64_t late_ = 0;
  std::vector<Session> sessions_;
  std::vector<int> active_;  // sessions not done
};

}  // namespace kvtier::bench
