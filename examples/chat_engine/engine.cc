// Engine: see engine.h.
#include "engine.h"

#include <dlfcn.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>

#include "pattern.h"

namespace chat {
namespace {

constexpr int64_t kMaxSteps = 10'000'000;

}  // namespace

Engine::Engine(const EngineConfig& config, std::vector<void*> kv, KvAccess* access)
    : config_(config), kv_(std::move(kv)), access_(access), rng_(Mix64(config.seed)) {
  sessions_.resize(config_.sessions);
  int64_t arrival = 0;
  for (int i = 0; i < config_.sessions; ++i) {
    sessions_[i].id = static_cast<uint32_t>(i);
    sessions_[i].ready_step = arrival;
    arrival += static_cast<int64_t>(Random(3));  // a new session every 0-2 steps
  }
  owner_.resize(config_.blocks);
  for (int64_t b = config_.blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

bool Engine::Validate(const EngineConfig& c, std::string* error) {
  int64_t longest = int64_t{c.turns} * (c.prompt_blocks + c.gen_blocks);
  if (longest > c.blocks) {
    char buf[256];
    snprintf(buf, sizeof buf,
             "a session's full context is %" PRId64 " blocks but each layer holds only %" PRId64
             "; raise --blocks or --kv-bytes, or lower --turns, --prompt-blocks or --gen-blocks",
             longest, c.blocks);
    *error = buf;
    return false;
  }
  return true;
}

uint64_t Engine::Random(uint64_t bound) {
  rng_ = Mix64(rng_);
  return bound ? rng_ % bound : 0;
}

uint8_t* Engine::BlockAddr(int layer, int32_t block) const {
  return static_cast<uint8_t*>(kv_[layer]) + static_cast<size_t>(block) * config_.block_bytes;
}

bool Engine::Run(std::string* error) {
  int done = 0;
  while (done < config_.sessions) {
    if (step_ >= kMaxSteps) {
      *error = "no progress after " + std::to_string(kMaxSteps) + " steps (scheduler bug)";
      return false;
    }
    // Running sessions keep their place; waiting ones join by return time.
    std::vector<Session*> running, ready;
    for (Session& s : sessions_) {
      if (s.state == State::kRunning) running.push_back(&s);
      if (s.state == State::kWaiting && s.ready_step <= step_) ready.push_back(&s);
    }
    std::sort(ready.begin(), ready.end(), [](const Session* a, const Session* b) {
      return a->ready_step != b->ready_step ? a->ready_step < b->ready_step : a->id < b->id;
    });
    for (Session* s : running) {
      if (s->state == State::kRunning && !DecodeStep(*s, error)) return false;
    }
    int active = 0;
    for (const Session& s : sessions_) active += s.state == State::kRunning;
    for (Session* s : ready) {
      if (active >= config_.max_active) break;
      bool started = false;
      if (!StartTurn(*s, &started, error)) return false;
      if (!started) break;  // no room until a running session finishes
      ++active;
    }
    done = 0;
    for (const Session& s : sessions_) done += s.state == State::kDone;
    ++step_;
    ++stats_.steps;
  }
  return true;
}

bool Engine::StartTurn(Session& s, bool* started, std::string* error) {
  size_t missing = static_cast<size_t>(s.context) - s.blocks.size();
  if (!MakeRoom(missing + static_cast<size_t>(config_.prompt_blocks), s)) return true;
  *started = true;
  if (config_.park) Unpark(s.blocks, /*wait=*/true);
  s.state = State::kRunning;
  s.turn_start_context = s.context;
  s.last_used = step_;
  // Prefill reads the cached context first: this is where a returning
  // session finds its KV (or the pages kvtier moved away come back).
  if (!ReadSession(s, error)) return false;
  if (missing > 0) {  // evicted while idle: prefill the whole context again
    ++stats_.recomputes;
    stats_.recompute_blocks += static_cast<int64_t>(missing);
    int context = s.context;
    s.context = static_cast<int>(s.blocks.size());
    while (s.context < context) {
      if (!WriteBlock(s, error)) return false;
    }
  }
  for (int i = 0; i < config_.prompt_blocks; ++i) {
    if (!WriteBlock(s, error)) return false;
  }
  s.gen_left = config_.gen_blocks;
  if (s.gen_left == 0) EndTurn(s);
  return true;
}

bool Engine::DecodeStep(Session& s, std::string* error) {
  s.last_used = step_;
  if (!ReadSession(s, error)) return false;
  if (free_.empty() && !MakeRoom(1, s)) {
    // Nothing idle to evict: preempt this session; it recomputes later.
    ++stats_.preemptions;
    ReleaseBlocks(s);
    s.context = s.turn_start_context;  // the turn starts over
    s.state = State::kWaiting;
    s.ready_step = step_ + 1;
    return true;
  }
  if (!WriteBlock(s, error)) return false;
  if (--s.gen_left == 0) EndTurn(s);
  return true;
}

void Engine::EndTurn(Session& s) {
  ++stats_.turns;
  if (++s.turns_done == config_.turns) {
    s.state = State::kDone;
    ReleaseBlocks(s);
    s.context = 0;
    ++stats_.sessions_served;
    return;
  }
  s.state = State::kWaiting;
  s.ready_step =
      step_ + 1 + static_cast<int64_t>(Random(static_cast<uint64_t>(config_.think_steps)));
  if (config_.park) Park(s);
}

bool Engine::MakeRoom(size_t blocks, const Session& requester) {
  while (free_.size() < blocks) {
    Session* victim = nullptr;
    for (Session& s : sessions_) {
      if (&s == &requester || s.state != State::kWaiting || s.blocks.empty()) continue;
      if (victim == nullptr || s.last_used < victim->last_used) victim = &s;
    }
    if (victim == nullptr) return false;
    ReleaseBlocks(*victim);
    ++stats_.evictions;
  }
  return true;
}

void Engine::ReleaseBlocks(Session& s) {
  // A parked session's blocks go to other sessions: wake them first (their
  // bytes no longer matter, but the promise not to touch them must end).
  if (config_.park && s.state == State::kWaiting) Unpark(s.blocks, /*wait=*/false);
  for (int32_t b : s.blocks) free_.push_back(b);
  s.blocks.clear();
}

namespace {

// kvtier's C API where libkvtier.so is preloaded, else null (the engine
// does not link kvtier: it only cooperates when it is there).
using HintFn = int (*)(const void*, size_t, int);
using WaitFn = int (*)(const void*, size_t);
constexpr int kHintWillNeed = 1;  // KVTIER_HINT_WILL_NEED (include/kvtier/kvtier.h)
constexpr int kHintDormant = 5;   // KVTIER_HINT_DORMANT
HintFn KvtierHint() {
  static const HintFn fn = reinterpret_cast<HintFn>(dlsym(RTLD_DEFAULT, "kvtier_hint"));
  return fn;
}
WaitFn KvtierWait() {
  static const WaitFn fn = reinterpret_cast<WaitFn>(dlsym(RTLD_DEFAULT, "kvtier_wait"));
  return fn;
}

}  // namespace

void Engine::Park(const Session& s) {
  HintFn hint = KvtierHint();
  if (hint == nullptr || s.blocks.empty()) return;
  for (int l = 0; l < config_.layers; ++l) {
    for (int32_t b : s.blocks) {
      if (hint(BlockAddr(l, b), config_.block_bytes, kHintDormant) != 0)
        ++stats_.kvtier_calls_failed;
    }
  }
  ++stats_.parked;
}

void Engine::Unpark(const std::vector<int32_t>& blocks, bool wait) {
  HintFn hint = KvtierHint();
  WaitFn wait_fn = KvtierWait();
  if (hint == nullptr || wait_fn == nullptr) return;
  for (int l = 0; l < config_.layers; ++l) {
    for (int32_t b : blocks) {
      const int rc = wait ? wait_fn(BlockAddr(l, b), config_.block_bytes)
                          : hint(BlockAddr(l, b), config_.block_bytes, kHintWillNeed);
      if (rc != 0) ++stats_.kvtier_calls_failed;
    }
  }
}

bool Engine::WriteBlock(Session& s, std::string* error) {
  int32_t b = free_.back();
  free_.pop_back();
  uint32_t index = static_cast<uint32_t>(s.blocks.size());
  BlockOwner owner{s.id, index, ++generation_};
  for (int l = 0; l < config_.layers; ++l) {
    uint64_t key = BlockKey(owner.session, owner.index, static_cast<uint32_t>(l), owner.generation);
    if (!access_->Write(BlockAddr(l, b), config_.block_bytes, key, error)) return false;
  }
  owner_[b] = owner;
  s.blocks.push_back(b);
  s.context = std::max(s.context, static_cast<int>(s.blocks.size()));
  ++stats_.blocks_written;
  return true;
}

bool Engine::ReadSession(const Session& s, std::string* error) {
  for (size_t i = 0; i < s.blocks.size(); ++i) {
    int32_t b = s.blocks[i];
    const BlockOwner& owner = owner_[b];
    for (int l = 0; l < config_.layers; ++l) {
      uint64_t key =
          BlockKey(owner.session, owner.index, static_cast<uint32_t>(l), owner.generation);
      bool ok = false;
      Mismatch m;
      if (!access_->Verify(BlockAddr(l, b), config_.block_bytes, key, &ok, &m, error)) return false;
      if (!ok) {
        char buf[512];
        snprintf(
            buf, sizeof buf,
            "integrity check failed: session %u block %zu (pool block %d, layer %d, written as "
            "generation %" PRIu64 ") at %p: word %zu (byte offset %zu) is 0x%016" PRIx64
            ", expected 0x%016" PRIx64,
            s.id, i, b, l, owner.generation, static_cast<void*>(BlockAddr(l, b)), m.word,
            m.word * 8, m.actual, m.expected);
        *error = buf;
        integrity_failed_ = true;
        return false;
      }
      ++stats_.checks_passed;
    }
    ++stats_.blocks_read;
  }
  return true;
}

}  // namespace chat
