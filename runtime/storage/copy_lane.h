// CopyLane: copies restored pages into the engine's memory on a helper
// thread while the thread that reads them goes on reading. A restore's copy
// is the larger part of its CPU: the destination was given back (a GPU's
// discarded range, a punched hole), so the kernel maps and zeroes it under
// the copy; on one thread those copies, not the disk, set the pace.
//
// One caller at a time has the helper (a Batch takes it at its first copy,
// for the rest of its life); a caller that finds it taken, or a lane
// without a helper (one core), copies inline. The helper falls behind the
// caller by at most kBacklogBytes (plus the copy that crossed it and the
// one it is making): past that the caller copies what it just read itself,
// while it is still in its cache.
//
// The helper is a kvtier thread started with every asynchronous signal
// blocked; a fork child has none (AbandonInForkChild; its Batches copy
// inline).
//
// Thread-safety: a Batch belongs to the thread that made it; the lane may
// be shared by any number of threads.
#pragma once

#include <atomic>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <thread>

#include "runtime/mutex.h"

namespace kvtier {

class CopyLane {
 public:
  // Starts the helper thread when `helper` (where it cannot start, every
  // copy runs inline). `name` is the thread's (at most 15 characters).
  CopyLane(bool helper, const char* name);
  ~CopyLane();  // joins the helper
  CopyLane(const CopyLane&) = delete;
  CopyLane& operator=(const CopyLane&) = delete;

  // In a fork child, where the helper does not exist: forgets it.
  void AbandonInForkChild();
  bool has_helper() const { return helper_ != nullptr; }

  // Bytes the helper may have queued before the caller copies itself.
  // With less (4 pages of 64 KiB), the caller copied so often that the disk
  // waited for it; 1 MiB keeps both threads copying.
  static constexpr size_t kBacklogBytes = size_t{1} << 20;

  // One caller's copies; every one has been made, and its `done` called,
  // when Wait returns (the destructor waits too).
  class Batch {
   public:
    // With `share`, the first copy takes the helper if it is free; else
    // every copy runs inline.
    Batch(CopyLane& lane, bool share) : lane_(lane), share_(share) {}
    ~Batch();  // waits, and gives the helper back
    Batch(const Batch&) = delete;
    Batch& operator=(const Batch&) = delete;

    // Copies `len` bytes from src to dst, here or on the helper, then calls
    // done() on the thread that copied. src and dst must stay valid until
    // then.
    void Copy(void* dst, const void* src, size_t len, std::function<void()> done);
    // Makes the copies the helper has not started here, then waits for
    // the helper's. The batch may go on copying.
    void Wait();
    // Whether the copies can go to the helper (tests).
    bool shared() const { return shared_; }

   private:
    CopyLane& lane_;
    bool share_;           // may take the helper
    bool tried_ = false;   // the first copy asked for it
    bool shared_ = false;  // holds the helper
  };

 private:
  struct Job {
    void* dst;
    const void* src;
    size_t len;
    std::function<void()> done;
  };
  void HelperLoop();
  static void Run(Job& job);

  std::atomic<bool> taken_{false};  // a Batch holds the helper
  Mutex mu_;
  CondVar work_cv_;  // a job was queued, or the lane stops
  CondVar idle_cv_;  // the helper's last job returned
  std::deque<Job> queue_ GUARDED_BY(mu_);
  size_t queued_bytes_ GUARDED_BY(mu_) = 0;
  size_t running_ GUARDED_BY(mu_) = 0;  // jobs the helper copies now
  bool stop_ GUARDED_BY(mu_) = false;
  std::unique_ptr<std::thread> helper_;
};

}  // namespace kvtier
