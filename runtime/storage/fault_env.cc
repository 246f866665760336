// FaultEnv and the IoQueue wrapper that applies its faults.
// Thread-safety: see fault_env.h; FaultQueue is single-owner like any IoQueue.
#include "runtime/storage/fault_env.h"

#include <errno.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <unordered_map>
#include <vector>

#include "runtime/units.h"

namespace kvtier {
namespace {

void SleepNanos(uint64_t ns) {
  struct timespec ts = {static_cast<time_t>(ns / 1000000000ull),
                        static_cast<long>(ns % 1000000000ull)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

class FaultQueue final : public IoQueue {
 public:
  FaultQueue(FaultEnv* env, std::unique_ptr<IoQueue> base) : env_(env), base_(std::move(base)) {}
  // Dropped without Abandon, it waits out its requests as an io_uring would
  // (late reads are held only for an owner that gives the queue up).
  ~FaultQueue() override {
    if (!abandoned_) (void)base_->Abandon(std::chrono::seconds(2), nullptr);
  }

  const char* name() const override { return base_->name(); }
  unsigned depth() const override { return base_->depth(); }
  Status RegisterBuffers(const struct iovec* iovs, unsigned count) override {
    return base_->RegisterBuffers(iovs, count);
  }
  Status SetWakeFd(int fd) override { return base_->SetWakeFd(fd); }

  Status Submit(const IoRequest* reqs, size_t count) override {
    in_flight_ += count;
    env_->NoteInFlight(in_flight_);
    std::vector<IoRequest> pass;
    pass.reserve(count);
    for (size_t i = 0; i < count; ++i) {
      IoRequest r = reqs[i];
      env_->NoteRequest(r);
      After after;
      after.slow = env_->Fires(Fault::kSlow);
      if (after.slow) env_->Count(Fault::kSlow);
      if (r.kind == IoKind::kWrite) {
        if (Fail(r, Fault::kWriteNoSpace, -ENOSPC) || Fail(r, Fault::kWriteIoError, -EIO)) continue;
        if (env_->Fires(Fault::kShortWrite)) {
          env_->Count(Fault::kShortWrite);
          r.len = static_cast<uint32_t>((r.len / 2) & ~uint32_t{kDirectAlign - 1});
          if (r.len == 0) {
            synthetic_.push_back({r.user_data, 0});
            continue;
          }
        } else if (env_->Fires(Fault::kDiskBitFlip)) {
          after.fault = Fault::kDiskBitFlip;
        }
      } else {
        if (env_->ReadBreaksQueue()) broken_ = true;
        if (Fail(r, Fault::kReadIoError, -EIO)) continue;
        if (env_->Fires(Fault::kReadBitFlip)) after.fault = Fault::kReadBitFlip;
      }
      if (after.slow || after.fault != kNone) {
        after.req = r;
        after_[r.user_data] = after;
      }
      pass.push_back(r);
    }
    Status st = pass.empty() ? Status::Ok() : base_->Submit(pass.data(), pass.size());
    if (!st.ok()) {
      in_flight_ -= pass.size();  // refused: the caller completes them itself
    } else {
      for (const IoRequest& r : pass) submitted_[r.user_data] = r;
    }
    return st;
  }

  size_t Abandon(std::chrono::nanoseconds limit, std::vector<IoCompletion>* landed) override {
    if (abandoned_) return 0;
    abandoned_ = true;
    if (landed != nullptr) landed->insert(landed->end(), synthetic_.begin(), synthetic_.end());
    synthetic_.clear();
    // The real requests are waited out below (for as long as they take,
    // when their landing is held: the test's reads are then on record); a
    // broken queue's reads, when the env holds them late, are reported as
    // still to land, and land when the test says.
    const bool late = (broken_ || env_->queues_broken()) && env_->holds_late_reads();
    std::vector<IoCompletion> came;
    size_t left = base_->Abandon(late ? std::chrono::seconds(10) : limit, &came);
    for (const IoCompletion& c : came) {
      auto it = submitted_.find(c.user_data);
      if (late && it != submitted_.end() && it->second.kind == IoKind::kRead) {
        env_->HoldLateRead(it->second.buf, it->second.len);
        ++left;
      } else if (landed != nullptr) {
        landed->push_back(c);
      }
      if (it != submitted_.end()) submitted_.erase(it);
    }
    return left;
  }

  Status Wait(size_t min, std::vector<IoCompletion>* out) override {
    if (broken_ || env_->queues_broken()) return Status::Error("I/O queue broken (injected)");
    size_t have = synthetic_.size();
    out->insert(out->end(), synthetic_.begin(), synthetic_.end());
    synthetic_.clear();
    size_t first = out->size();
    Status st = base_->Wait(min > have ? min - have : 0, out);
    in_flight_ -= std::min(in_flight_, out->size() - first + have);
    for (size_t i = first; i < out->size(); ++i) submitted_.erase((*out)[i].user_data);
    if (!st.ok()) return st;
    for (size_t i = first; i < out->size(); ++i) {
      auto it = after_.find((*out)[i].user_data);
      if (it == after_.end()) continue;
      Apply(it->second, (*out)[i].result);
      after_.erase(it);
    }
    return Status::Ok();
  }

 private:
  static constexpr Fault kNone = static_cast<Fault>(0xff);
  struct After {
    Fault fault = kNone;
    bool slow = false;
    IoRequest req;
  };

  bool Fail(const IoRequest& r, Fault f, int err) {
    if (!env_->Fires(f)) return false;
    env_->Count(f);
    synthetic_.push_back({r.user_data, err});
    return true;
  }

  void Apply(const After& a, int64_t result) {
    if (a.slow) env_->SlowCompletion();
    if (result <= 0) return;
    uint64_t at = env_->Random() % static_cast<uint64_t>(result);
    uint8_t mask = static_cast<uint8_t>(1u << (env_->Random() % 8));
    if (a.fault == Fault::kReadBitFlip) {
      static_cast<uint8_t*>(a.req.buf)[at] ^= mask;
      env_->Count(Fault::kReadBitFlip);
    } else if (a.fault == Fault::kDiskBitFlip && FlipOnDisk(a.req.fd, a.req.offset + at, mask)) {
      env_->Count(Fault::kDiskBitFlip);
    }
  }

  // Read-modify-write of the aligned block holding the byte, so it works on
  // O_DIRECT files too.
  static bool FlipOnDisk(int fd, uint64_t pos, uint8_t mask) {
    Result<AlignedBuffer> buf = AlignedBuffer::Allocate(kDirectAlign);
    if (!buf.ok()) return false;
    uint64_t block = pos & ~uint64_t{kDirectAlign - 1};
    ssize_t n = pread(fd, buf.value().data(), kDirectAlign, static_cast<off_t>(block));
    if (n <= static_cast<ssize_t>(pos - block)) return false;
    buf.value().data()[pos - block] ^= mask;
    return pwrite(fd, buf.value().data(), static_cast<size_t>(n), static_cast<off_t>(block)) == n;
  }

  FaultEnv* const env_;
  std::unique_ptr<IoQueue> base_;
  std::vector<IoCompletion> synthetic_;
  std::unordered_map<uint64_t, After> after_;
  std::unordered_map<uint64_t, IoRequest> submitted_;  // passed to base_, not yet returned
  size_t in_flight_ = 0;                               // submitted, not yet returned by Wait
  bool broken_ = false;                                // FaultEnv::BreakQueueAtRead took this queue
  bool abandoned_ = false;                             // given up (Abandon)
};

}  // namespace

bool FaultEnv::ReadBreaksQueue() {
  int n = break_at_read_.load();
  while (n > 0 && !break_at_read_.compare_exchange_weak(n, n - 1)) {
  }
  return n == 1;
}

void FaultEnv::NoteRequest(const IoRequest& r) {
  const int k = r.kind == IoKind::kRead ? 0 : 1;
  requests_[k].fetch_add(1);
  request_bytes_[k].fetch_add(r.len);
}

void FaultEnv::NoteInFlight(uint64_t n) {
  uint64_t seen = max_in_flight_.load();
  while (n > seen && !max_in_flight_.compare_exchange_weak(seen, n)) {
  }
}

const char* FaultName(Fault f) {
  switch (f) {
    case Fault::kWriteNoSpace:
      return "write-enospc";
    case Fault::kWriteIoError:
      return "write-eio";
    case Fault::kShortWrite:
      return "short-write";
    case Fault::kDiskBitFlip:
      return "disk-bit-flip";
    case Fault::kReadIoError:
      return "read-eio";
    case Fault::kReadBitFlip:
      return "read-bit-flip";
    case Fault::kAllocNoSpace:
      return "fallocate-enospc";
    case Fault::kSlow:
      return "slow";
  }
  return "?";
}

FaultEnv::FaultEnv(Env* base, uint64_t seed) : base_(base), rng_(seed) {}

bool FaultSpec::any() const {
  for (double r : rates) {
    if (r > 0) return true;
  }
  return false;
}

Result<FaultSpec> ParseFaultSpec(std::string_view text) {
  static const std::string kForm = [] {
    std::string kinds;
    for (int k = 0; k < kFaultKinds; ++k) {
      kinds += std::string(k ? "|" : "") + FaultName(static_cast<Fault>(k));
    }
    return "none, or kind:rate items joined by ',', kind one of " + kinds +
           ", rate in [0, 1]; slow takes a delay: slow:0.01@5ms";
  }();
  FaultSpec spec;
  if (text.empty() || text == "none") return spec;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view item = text.substr(start, end - start);
    start = end + 1;
    auto bad = [&](const char* why) {
      return Status::Errorf("KVTIER_DISK_FAULTS item '%s': %s (accepted: %s)",
                            EchoValue(item).c_str(), why, kForm.c_str());
    };
    const size_t colon = item.find(':');
    if (colon == std::string_view::npos) return bad("no ':rate'");
    const std::string_view kind = item.substr(0, colon);
    std::string_view rate_text = item.substr(colon + 1);
    int k = 0;
    while (k < kFaultKinds && kind != FaultName(static_cast<Fault>(k))) ++k;
    if (k == kFaultKinds) return bad("unknown kind");
    const bool slow = static_cast<Fault>(k) == Fault::kSlow;
    const size_t at = rate_text.find('@');
    if (slow != (at != std::string_view::npos)) {
      return bad(slow ? "slow needs a delay (slow:rate@5ms)" : "only slow takes a delay");
    }
    if (slow) {
      const std::string_view delay = rate_text.substr(at + 1);
      rate_text = rate_text.substr(0, at);
      uint64_t unit = 0;
      std::string_view digits = delay;
      if (delay.ends_with("us")) {
        unit = 1000;
        digits.remove_suffix(2);
      } else if (delay.ends_with("ms")) {
        unit = 1000000;
        digits.remove_suffix(2);
      }
      uint64_t n = 0;
      auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
      if (unit == 0 || digits.empty() || ec != std::errc() || p != digits.data() + digits.size() ||
          n > 10000 * (1000000 / unit)) {
        return bad("the delay is a whole number of us or ms, at most 10 s");
      }
      spec.slow_ns = n * unit;
    }
    const std::string rate_string(rate_text);
    char* rate_end = nullptr;
    const double rate = rate_string.empty() ? -1 : strtod(rate_string.c_str(), &rate_end);
    if (rate_string.empty() || rate_end != rate_string.c_str() + rate_string.size() ||
        !(rate >= 0 && rate <= 1)) {
      return bad("the rate is a number in [0, 1]");
    }
    spec.rates[k] = rate;
  }
  return spec;
}

void FaultEnv::Apply(const FaultSpec& spec) {
  for (int k = 0; k < kFaultKinds; ++k) SetRate(static_cast<Fault>(k), spec.rates[k]);
  SetSlowDelay(spec.slow_ns);
}

std::string InjectedSummary(const FaultEnv& env) {
  std::string out;
  for (int k = 0; k < kFaultKinds; ++k) {
    const uint64_t n = env.injected(static_cast<Fault>(k));
    if (n == 0) continue;
    out += std::string(out.empty() ? "" : ", ") + FaultName(static_cast<Fault>(k)) + " " +
           std::to_string(n);
  }
  return out;
}

void FaultEnv::HoldLateReads(bool on) {
  MutexLock lock(&mu_);
  hold_late_ = on;
}

bool FaultEnv::holds_late_reads() {
  MutexLock lock(&mu_);
  return hold_late_;
}

void FaultEnv::HoldLateRead(void* buf, size_t len) {
  MutexLock lock(&mu_);
  late_.push_back({buf, len});
}

size_t FaultEnv::LandLateReads() {
  MutexLock lock(&mu_);
  for (const LateRead& r : late_) memset(r.buf, kLateByte, r.len);
  const size_t n = late_.size();
  late_.clear();
  return n;
}

void FaultEnv::HoldSlow() {
  MutexLock lock(&hold_mu_);
  holding_ = true;
}

bool FaultEnv::WaitForHeld(int n, uint64_t timeout_ns) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::nanoseconds(timeout_ns);
  MutexLock lock(&hold_mu_);
  while (held_ < n) {
    if (!hold_cv_.WaitUntil(hold_mu_, deadline) && held_ < n) return false;
  }
  return true;
}

void FaultEnv::ReleaseHeld() {
  MutexLock lock(&hold_mu_);
  holding_ = false;
  hold_cv_.SignalAll();
}

void FaultEnv::SlowCompletion() {
  {
    MutexLock lock(&hold_mu_);
    if (holding_) {
      ++held_;
      hold_cv_.SignalAll();
      while (holding_) hold_cv_.Wait(hold_mu_);
      --held_;
      return;
    }
  }
  SleepNanos(slow_ns_.load());
}

void FaultEnv::Arm(Fault f, int times, int skip) {
  MutexLock lock(&mu_);
  Rule& r = rules_[static_cast<int>(f)];
  r.times = times;
  r.skip = skip;
}

void FaultEnv::SetRate(Fault f, double p) {
  MutexLock lock(&mu_);
  rules_[static_cast<int>(f)].rate = p;
}

void FaultEnv::Clear() {
  MutexLock lock(&mu_);
  for (Rule& r : rules_) r = Rule();
}

void FaultEnv::SetClock(uint64_t ns) {
  clock_ns_.store(ns);
  manual_clock_.store(true);
}

uint64_t FaultEnv::NowNanos() {
  return manual_clock_.load() ? clock_ns_.load() : base_->NowNanos();
}

bool FaultEnv::Fires(Fault f) {
  MutexLock lock(&mu_);
  Rule& r = rules_[static_cast<int>(f)];
  if (r.times != 0) {
    if (r.skip > 0) {
      --r.skip;
    } else {
      if (r.times > 0) --r.times;
      return true;
    }
  }
  if (r.rate <= 0) return false;
  return static_cast<double>(NextRandomLocked() >> 11) * 0x1.0p-53 < r.rate;
}

uint64_t FaultEnv::Random() {
  MutexLock lock(&mu_);
  return NextRandomLocked();
}

uint64_t FaultEnv::NextRandomLocked() {  // splitmix64
  uint64_t z = (rng_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

Result<int> FaultEnv::OpenTmpFile(const std::string& dir, bool direct) {
  if (refuse_tmpfile_.load())
    return Status::Errorf("open(%s, O_TMPFILE): %s (injected)", dir.c_str(), strerror(EOPNOTSUPP));
  if (direct && refuse_direct_.load())
    return Status::Errorf("open(%s, O_DIRECT): %s (injected)", dir.c_str(), strerror(EINVAL));
  return base_->OpenTmpFile(dir, direct);
}

Result<int> FaultEnv::OpenUnlinkedFile(const std::string& dir, bool direct) {
  if (direct && refuse_direct_.load())
    return Status::Errorf("open(%s, O_DIRECT): %s (injected)", dir.c_str(), strerror(EINVAL));
  return base_->OpenUnlinkedFile(dir, direct);
}

Status FaultEnv::Allocate(int fd, uint64_t offset, uint64_t len) {
  if (Fires(Fault::kAllocNoSpace)) {
    Count(Fault::kAllocNoSpace);
    return Status::Errorf("fallocate(offset %llu, %llu bytes): %s (injected)",
                          static_cast<unsigned long long>(offset),
                          static_cast<unsigned long long>(len), strerror(ENOSPC));
  }
  return base_->Allocate(fd, offset, len);
}

Result<std::unique_ptr<IoQueue>> FaultEnv::NewUringQueue(unsigned depth) {
  if (refuse_uring_.load())
    return Status::Errorf("io_uring_queue_init(%u entries): %s (injected)", depth,
                          strerror(ENOSYS));
  Result<std::unique_ptr<IoQueue>> q = base_->NewUringQueue(depth);
  if (!q.ok()) return q.status();
  return Wrap(std::move(q).value());
}

std::unique_ptr<IoQueue> FaultEnv::NewSyncQueue(unsigned depth) {
  return Wrap(base_->NewSyncQueue(depth));
}

std::unique_ptr<IoQueue> FaultEnv::Wrap(std::unique_ptr<IoQueue> base) {
  return std::make_unique<FaultQueue>(this, std::move(base));
}

}  // namespace kvtier
