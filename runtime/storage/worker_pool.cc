// WorkerPool: a posted job whose pieces every free thread takes in turn.
// Thread-safety: see the header.
#include "runtime/storage/worker_pool.h"

#include <pthread.h>

#include <system_error>

#include "runtime/internal_thread.h"
#include "runtime/log.h"

namespace kvtier {

WorkerPool::WorkerPool(unsigned helpers) {
  sigset_t old;
  BlockAsyncSignals(&old);
  for (unsigned i = 0; i < helpers; ++i) {
    try {
      helpers_.emplace_back([this] { HelperLoop(); });
    } catch (const std::system_error& e) {
      Log(1,
          "disk tier: started %u of %u crypto helper threads (%s); the rest of the work runs "
          "on the callers",
          i, helpers, e.what());
      break;
    }
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

WorkerPool::~WorkerPool() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  work_cv_.SignalAll();
  for (std::thread& t : helpers_) t.join();
}

void WorkerPool::AbandonInForkChild() {
  // Leaked on purpose: a std::thread of a thread that does not exist in
  // this process must be neither joined nor destroyed.
  new std::vector<std::thread>(std::move(helpers_));
  helpers_.clear();
}

bool WorkerPool::TakePiece(size_t* index, const std::function<void(size_t)>** piece) {
  if (piece_ == nullptr || next_ >= count_) return false;
  *index = next_++;
  *piece = piece_;
  return true;
}

void WorkerPool::FinishPiece() {
  if (--left_ == 0) done_cv_.SignalAll();
}

void WorkerPool::Run(size_t n, const std::function<void(size_t)>& piece) {
  auto alone = [&] {
    for (size_t i = 0; i < n; ++i) piece(i);
  };
  if (n <= 1 || helpers_.empty()) return alone();
  if (!busy_.TryLock()) return alone();  // another caller's job has the helpers
  MutexLock lock(&mu_);
  piece_ = &piece;
  count_ = n;
  next_ = 0;
  left_ = n;
  work_cv_.SignalAll();
  size_t i;
  const std::function<void(size_t)>* mine;
  while (TakePiece(&i, &mine)) {
    lock.Unlock();
    (*mine)(i);
    lock.Lock();
    FinishPiece();
  }
  while (left_ > 0) done_cv_.Wait(mu_);
  piece_ = nullptr;
  lock.Unlock();
  busy_.Unlock();
}

void WorkerPool::HelperLoop() {
  MarkKvtierThread();
  pthread_setname_np(pthread_self(), "kvtier-crypto");
  MutexLock lock(&mu_);
  for (;;) {
    size_t i;
    const std::function<void(size_t)>* piece;
    while (!stop_ && !TakePiece(&i, &piece)) work_cv_.Wait(mu_);
    if (stop_) return;
    lock.Unlock();
    (*piece)(i);
    lock.Lock();
    FinishPiece();
  }
}

}  // namespace kvtier
