// CopyLane: a restore's copies shared with one helper thread.
// Thread-safety: see the header.
#include "runtime/storage/copy_lane.h"

#include <pthread.h>

#include <cstring>
#include <string>
#include <system_error>

#include "runtime/internal_thread.h"
#include "runtime/log.h"

namespace kvtier {

CopyLane::CopyLane(bool helper, const char* name) {
  if (!helper) return;
  sigset_t old;
  BlockAsyncSignals(&old);
  try {
    helper_ = std::make_unique<std::thread>([this, thread_name = std::string(name)] {
      MarkKvtierThread();
      pthread_setname_np(pthread_self(), thread_name.c_str());
      HelperLoop();
    });
  } catch (const std::system_error& e) {
    Log(1, "%s: no copy helper thread (%s); restores copy on the thread that reads", name,
        e.what());
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

CopyLane::~CopyLane() {
  if (helper_ == nullptr) return;
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  work_cv_.SignalAll();
  helper_->join();
}

void CopyLane::AbandonInForkChild() {
  // Leaked on purpose: a std::thread of a thread that does not exist in
  // this process must be neither joined nor destroyed.
  (void)helper_.release();
}

void CopyLane::Run(Job& job) {
  memcpy(job.dst, job.src, job.len);
  job.done();
}

void CopyLane::HelperLoop() {
  MutexLock lock(&mu_);
  for (;;) {
    while (!stop_ && queue_.empty()) work_cv_.Wait(mu_);
    if (queue_.empty()) return;  // stopping; a Batch never outlives the lane
    Job job = std::move(queue_.front());
    queue_.pop_front();
    queued_bytes_ -= job.len;
    ++running_;
    lock.Unlock();
    Run(job);
    lock.Lock();
    if (--running_ == 0 && queue_.empty()) idle_cv_.SignalAll();
  }
}

void CopyLane::Batch::Copy(void* dst, const void* src, size_t len, std::function<void()> done) {
  Job job{dst, src, len, std::move(done)};
  if (!tried_) {
    // Taken now, not when the batch was made: a caller that makes its batch
    // and then waits (for the disk's pipeline) leaves the helper to others.
    tried_ = true;
    bool free = false;
    shared_ =
        share_ && lane_.helper_ != nullptr && lane_.taken_.compare_exchange_strong(free, true);
  }
  if (shared_) {
    MutexLock lock(&lane_.mu_);
    if (lane_.queued_bytes_ < kBacklogBytes) {
      lane_.queued_bytes_ += len;
      lane_.queue_.push_back(std::move(job));
      lane_.work_cv_.Signal();
      return;
    }
  }
  Run(job);
}

void CopyLane::Batch::Wait() {
  if (!shared_) return;
  MutexLock lock(&lane_.mu_);
  while (!lane_.queue_.empty()) {
    Job job = std::move(lane_.queue_.back());
    lane_.queue_.pop_back();
    lane_.queued_bytes_ -= job.len;
    lock.Unlock();
    Run(job);
    lock.Lock();
  }
  while (lane_.running_ > 0) lane_.idle_cv_.Wait(lane_.mu_);
}

CopyLane::Batch::~Batch() {
  Wait();
  if (shared_) lane_.taken_.store(false);
}

}  // namespace kvtier
