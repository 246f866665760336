// FaultEnv: an Env that injects storage faults into another Env, for tests
// and for `kvtier-bench spill --faults`. Deterministic: a request's fate
// depends only on the seed, the rules and the order of requests.
//
// Faults are decided per request when it is submitted:
//   write: ENOSPC, EIO, short write, or a bit flipped on disk after the write
//   read:  EIO, or a bit flipped in the returned bytes (the disk stays good)
//   fallocate: ENOSPC
//   any request: completes only after the slow-device delay
// Open/io_uring refusals (RefuseTmpfile/Direct/Uring) exercise the fallbacks;
// BreakQueues makes every Wait fail, as a broken io_uring would;
// BreakQueueAtRead breaks only the queue of one read.
//
// Thread-safety: every method may be called from any thread (rules are under
// a mutex). Queues must have distinct user_data among requests in flight.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/mutex.h"
#include "runtime/status.h"
#include "runtime/storage/env.h"

namespace kvtier {

enum class Fault : uint8_t {
  kWriteNoSpace,  // the write fails with ENOSPC; nothing is written
  kWriteIoError,  // the write fails with EIO
  kShortWrite,    // the write transfers only part of the bytes
  kDiskBitFlip,   // the write succeeds, then one bit of it flips on disk
  kReadIoError,   // the read fails with EIO
  kReadBitFlip,   // the read succeeds with one bit of the returned bytes flipped
  kAllocNoSpace,  // fallocate fails with ENOSPC
  kSlow,          // the request completes only after the slow delay
};
constexpr int kFaultKinds = 8;
const char* FaultName(Fault f);

// KVTIER_DISK_FAULTS: "kind:rate[,kind:rate]...", kind a FaultName (or
// "slow:rate@delay", delay such as 5ms or 200us), rate a probability in
// [0, 1] that each eligible request gets it. "none" (or empty): no faults.
struct FaultSpec {
  double rates[kFaultKinds] = {};
  uint64_t slow_ns = 0;
  bool any() const;
};
// Fails with a message naming the bad item and the accepted form.
Result<FaultSpec> ParseFaultSpec(std::string_view text);
// "write-enospc 12, slow 3" for the faults that fired (empty if none).
std::string InjectedSummary(const class FaultEnv& env);

class FaultEnv final : public Env {
 public:
  // `base` must outlive this Env.
  explicit FaultEnv(Env* base, uint64_t seed = 1);

  // The next `times` eligible requests get `f`, after `skip` eligible ones
  // pass untouched. times < 0: every eligible request from then on.
  void Arm(Fault f, int times = 1, int skip = 0);
  // Each eligible request independently gets `f` with probability p.
  void SetRate(Fault f, double p);
  // Every rate and the slow delay of `spec`.
  void Apply(const FaultSpec& spec);
  // Disarms every fault and rate.
  void Clear();
  void SetSlowDelay(uint64_t ns) { slow_ns_.store(ns); }
  // Holds slow requests instead of delaying them: each one's completion
  // waits (in the thread that reaps it) until ReleaseHeld. A test that needs
  // an I/O in flight while it acts holds it, waits for it with WaitForHeld,
  // acts, and releases it: the ordering is stated, no delay holds it open.
  void HoldSlow();
  // Waits until `n` requests are held at once; false after `timeout_ns`.
  bool WaitForHeld(int n, uint64_t timeout_ns) EXCLUDES(hold_mu_);
  // Lets the held requests, and every later slow one, complete.
  void ReleaseHeld() EXCLUDES(hold_mu_);
  void RefuseTmpfile(bool on) { refuse_tmpfile_.store(on); }
  void RefuseDirect(bool on) { refuse_direct_.store(on); }
  void RefuseUring(bool on) { refuse_uring_.store(on); }
  // Every queue's Wait fails from now on (an io_uring that broke): what is
  // in flight never completes for the caller.
  void BreakQueues(bool on) { break_queues_.store(on); }
  bool queues_broken() const { return break_queues_.load(); }
  // The queue that submits the n-th read from now (n >= 1) breaks: its
  // next Wait and every later one fail, and what it has in flight never
  // completes for its caller (the requests still run, and its destruction
  // waits for them, as an io_uring's would); other queues go on.
  void BreakQueueAtRead(int n) { break_at_read_.store(n); }
  // Models reads that outlive their broken queue (a kernel that completes
  // them after their owner stopped waiting): on, a queue that breaks
  // reports the reads it had in flight as still to land when it is given
  // up (IoQueue::Abandon), and each lands, filling its buffer with
  // kLateByte, only at LandLateReads. Off by default.
  void HoldLateReads(bool on) EXCLUDES(mu_);
  // Lands the reads so held; returns how many there were.
  size_t LandLateReads() EXCLUDES(mu_);
  static constexpr uint8_t kLateByte = 0xa5;
  // Whether a break so armed is still to come.
  bool queue_break_armed() const { return break_at_read_.load() > 0; }
  // Counts a read down to that break: true for the n-th.
  bool ReadBreaksQueue();
  // Switches NowNanos to a manual clock (tests of backoff never sleep).
  void SetClock(uint64_t ns);
  void AdvanceClock(uint64_t ns) { clock_ns_.fetch_add(ns); }
  // How many times `f` actually took effect.
  uint64_t injected(Fault f) const { return injected_[static_cast<int>(f)].load(); }
  // The most requests one queue had submitted and not yet completed at once
  // (whether spills and restores really overlap).
  uint64_t max_in_flight() const { return max_in_flight_.load(); }
  // Requests of `kind` submitted through this Env's queues, and their bytes
  // (how many reads a restore took).
  uint64_t requests(IoKind kind) const { return requests_[kind == IoKind::kRead ? 0 : 1].load(); }
  uint64_t request_bytes(IoKind kind) const {
    return request_bytes_[kind == IoKind::kRead ? 0 : 1].load();
  }

  Status CreateDir(const std::string& dir) override { return base_->CreateDir(dir); }
  Result<int> OpenTmpFile(const std::string& dir, bool direct) override;
  Result<int> OpenUnlinkedFile(const std::string& dir, bool direct) override;
  Status Allocate(int fd, uint64_t offset, uint64_t len) override;
  void Close(int fd) override { base_->Close(fd); }
  Result<std::unique_ptr<IoQueue>> NewUringQueue(unsigned depth) override;
  std::unique_ptr<IoQueue> NewSyncQueue(unsigned depth) override;
  uint64_t NowNanos() override;
  Result<std::string> ReadFile(const std::string& path, size_t max_bytes) override {
    return base_->ReadFile(path, max_bytes);
  }

  // Used by the wrapping queues (fault_env.cc).
  // Returns whether `f` fires for the next eligible request (counts it).
  bool Fires(Fault f);
  uint64_t Random();
  void Count(Fault f) { injected_[static_cast<int>(f)].fetch_add(1); }
  // A slow request's completion: sleeps the slow delay, or is held.
  void SlowCompletion() EXCLUDES(hold_mu_);
  void NoteInFlight(uint64_t n);
  void NoteRequest(const IoRequest& r);
  bool holds_late_reads() EXCLUDES(mu_);
  void HoldLateRead(void* buf, size_t len) EXCLUDES(mu_);

 private:
  struct Rule {
    int skip = 0;
    int times = 0;  // < 0: forever
    double rate = 0;
  };
  std::unique_ptr<IoQueue> Wrap(std::unique_ptr<IoQueue> base);
  uint64_t NextRandomLocked() REQUIRES(mu_);

  Env* const base_;
  Mutex mu_;
  uint64_t rng_ GUARDED_BY(mu_);
  Rule rules_[kFaultKinds] GUARDED_BY(mu_);
  struct LateRead {
    void* buf;
    size_t len;
  };
  bool hold_late_ GUARDED_BY(mu_) = false;
  std::vector<LateRead> late_ GUARDED_BY(mu_);
  std::atomic<uint64_t> injected_[kFaultKinds] = {};
  std::atomic<uint64_t> slow_ns_{0};
  Mutex hold_mu_;  // never held with mu_
  CondVar hold_cv_;
  bool holding_ GUARDED_BY(hold_mu_) = false;
  int held_ GUARDED_BY(hold_mu_) = 0;
  std::atomic<bool> refuse_tmpfile_{false}, refuse_direct_{false}, refuse_uring_{false};
  std::atomic<bool> break_queues_{false};
  std::atomic<int> break_at_read_{0};  // 0: none armed
  std::atomic<bool> manual_clock_{false};
  std::atomic<uint64_t> clock_ns_{0};
  std::atomic<uint64_t> max_in_flight_{0};
  std::atomic<uint64_t> requests_[2] = {0, 0};  // reads, writes
  std::atomic<uint64_t> request_bytes_[2] = {0, 0};
};

}  // namespace kvtier
