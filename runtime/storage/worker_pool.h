// WorkerPool: runs the pieces of one job on the calling thread and a few
// helper threads at once. The disk tier seals and opens pages with it, so
// that AES-GCM on one core does not cap how fast pages go to and come back
// from a fast SSD.
//
// One job at a time: a caller that finds the pool busy runs its own pieces
// alone, so callers never wait on each other's jobs. The helpers are kvtier
// threads (the host backend's heap hooks pass their allocations through)
// started with every asynchronous signal blocked; a fork child has none
// (it must not Run).
//
// Thread-safety: Run may be called from any thread.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "runtime/mutex.h"

namespace kvtier {

class WorkerPool {
 public:
  // A pool of `helpers` threads besides its callers (fewer if threads
  // cannot be started: Run then does more of the work itself).
  explicit WorkerPool(unsigned helpers);
  ~WorkerPool();  // joins the helpers
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Calls piece(i) once for every i in [0, n), in any order, on the caller
  // and the helpers, and returns when every call has returned.
  void Run(size_t n, const std::function<void(size_t)>& piece);
  // The threads a job can use: the helpers and the caller.
  size_t width() const { return helpers_.size() + 1; }
  // In a fork child, where the helpers do not exist: forgets them, so Run
  // works alone and the destructor joins nothing.
  void AbandonInForkChild();

 private:
  void HelperLoop();
  // Takes the next piece of the job, if any is left.
  bool TakePiece(size_t* index, const std::function<void(size_t)>** piece) REQUIRES(mu_);
  void FinishPiece() REQUIRES(mu_);

  Mutex busy_;  // held by the caller whose job the helpers work on
  Mutex mu_;
  CondVar work_cv_;  // a job was posted, or the pool stops
  CondVar done_cv_;  // the job's last piece returned
  const std::function<void(size_t)>* piece_ GUARDED_BY(mu_) = nullptr;
  size_t count_ GUARDED_BY(mu_) = 0;
  size_t next_ GUARDED_BY(mu_) = 0;
  size_t left_ GUARDED_BY(mu_) = 0;
  bool stop_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> helpers_;
};

}  // namespace kvtier
