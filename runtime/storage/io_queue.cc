// io_uring and pread/pwrite implementations of IoQueue.
// Thread-safety: single-owner (see env.h).
#include "runtime/storage/io_queue.h"

#include <errno.h>
#include <liburing.h>
#include <poll.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <vector>

namespace kvtier {
namespace {

class UringQueue final : public IoQueue {
 public:
  explicit UringQueue(unsigned depth) : depth_(depth) {}
  ~UringQueue() override {
    if (!ready_) return;
    // A request in flight lands in its buffer even after the ring is gone
    // (the kernel ends the ring's requests in the background): dropped with
    // requests in flight, the queue waits them out, so that no buffer is
    // written after its owner gave it back. An owner that saw the queue
    // break calls Abandon first and keeps the buffers it names.
    (void)Abandon(kDrainWait, nullptr);
    io_uring_queue_exit(&ring_);
  }

  size_t Abandon(std::chrono::nanoseconds limit, std::vector<IoCompletion>* landed) override {
    // Not in a fork child: the ring's completions are the parent's, and the
    // parent may reap them first (the child's copies of the buffers are
    // its own: the kernel writes the parent's). At most `limit`: a device
    // that never answers, or a count one too high (a wake poll the kernel
    // took in a short submit is counted as a request), must not hang the
    // caller; what is left is reported.
    if (getpid() != owner_) in_flight_ = 0;
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (in_flight_ > 0) {
      const auto left = deadline - std::chrono::steady_clock::now();
      if (left <= std::chrono::nanoseconds::zero()) break;
      const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
      struct __kernel_timespec ts = {ns / 1000000000, ns % 1000000000};
      struct io_uring_cqe* cqe;
      const int rc = io_uring_wait_cqe_timeout(&ring_, &cqe, &ts);
      if (rc == -EINTR || rc == -EAGAIN) continue;
      if (rc < 0) break;  // timed out, or nothing more can be learned from this ring
      const uint64_t tag = io_uring_cqe_get_data64(cqe);
      if (tag != kWakeTag) {
        --in_flight_;
        if (landed != nullptr) landed->push_back({tag, cqe->res});
      }
      io_uring_cqe_seen(&ring_, cqe);
    }
    const size_t left = in_flight_;
    in_flight_ = 0;  // given up: the destructor waits for nothing more
    return left;
  }

  Status Init() {
    // COOP_TASKRUN saves an interrupt per completion; older kernels refuse
    // the flag, so retry without it.
    struct io_uring_params params = {};
    params.flags = IORING_SETUP_COOP_TASKRUN;
    // One entry more than the depth: the wake descriptor's poll.
    int rc = io_uring_queue_init_params(depth_ + 1, &ring_, &params);
    if (rc == -EINVAL) rc = io_uring_queue_init(depth_ + 1, &ring_, 0);
    if (rc < 0) return Status::Errorf("io_uring_queue_init(%u entries): %s", depth_, strerror(-rc));
    ready_ = true;
    owner_ = getpid();
    return Status::Ok();
  }

  const char* name() const override { return "io_uring"; }
  unsigned depth() const override { return depth_; }

  Status RegisterBuffers(const struct iovec* iovs, unsigned count) override {
    int rc = io_uring_register_buffers(&ring_, iovs, count);
    if (rc == 0) return Status::Ok();
    size_t bytes = 0;
    for (unsigned i = 0; i < count; ++i) bytes += iovs[i].iov_len;
    struct rlimit lim = {};
    getrlimit(RLIMIT_MEMLOCK, &lim);
    return Status::Errorf(
        "io_uring_register_buffers(%u buffers, %zu bytes): %s (RLIMIT_MEMLOCK %llu bytes; "
        "raise it with ulimit -l to use fixed buffers)",
        count, bytes, strerror(-rc), static_cast<unsigned long long>(lim.rlim_cur));
  }

  Status Submit(const IoRequest* reqs, size_t count) override {
    for (size_t i = 0; i < count; ++i) {
      struct io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
      if (sqe == nullptr) {
        Status st = Flush();
        if (!st.ok()) return st;
        sqe = io_uring_get_sqe(&ring_);
        if (sqe == nullptr) return Status::Error("io_uring: submission queue full");
      }
      const IoRequest& r = reqs[i];
      if (r.kind == IoKind::kWrite) {
        if (r.buf_index >= 0) {
          io_uring_prep_write_fixed(sqe, r.fd, r.buf, r.len, r.offset, r.buf_index);
        } else {
          io_uring_prep_write(sqe, r.fd, r.buf, r.len, r.offset);
        }
      } else {
        if (r.buf_index >= 0) {
          io_uring_prep_read_fixed(sqe, r.fd, r.buf, r.len, r.offset, r.buf_index);
        } else {
          io_uring_prep_read(sqe, r.fd, r.buf, r.len, r.offset);
        }
      }
      io_uring_sqe_set_data64(sqe, r.user_data);
      ++unsubmitted_;
    }
    return Flush();
  }

  Status SetWakeFd(int fd) override {
    wake_fd_ = fd;
    return ArmWake();
  }

  Status Wait(size_t min, std::vector<IoCompletion>* out) override {
    size_t got = 0;
    for (;;) {
      struct io_uring_cqe* cqe;
      unsigned head;
      unsigned seen = 0;
      bool fired = false;
      io_uring_for_each_cqe(&ring_, head, cqe) {
        if (io_uring_cqe_get_data64(cqe) == kWakeTag) {
          fired = true;
        } else {
          out->push_back({io_uring_cqe_get_data64(cqe), cqe->res});
          ++got;
          if (in_flight_ > 0) --in_flight_;  // never below: fewer may be counted
        }
        ++seen;
      }
      io_uring_cq_advance(&ring_, seen);
      if (fired) {
        uint64_t count;
        while (read(wake_fd_, &count, sizeof count) < 0 && errno == EINTR) {
        }
        if (Status st = ArmWake(); !st.ok()) return st;
        woken_ = true;
      }
      if (got >= min) return Status::Ok();
      // A wake seen by a Wait(0) ends the next blocking Wait.
      if (woken_) {
        woken_ = false;
        return Status::Ok();
      }
      // With a wake descriptor its poll's completion ends the wait too.
      const unsigned need = wake_fd_ >= 0 ? 1 : static_cast<unsigned>(min - got);
      int rc = io_uring_wait_cqe_nr(&ring_, &cqe, need);
      if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -ETIME) {
        return Status::Errorf("io_uring wait: %s", strerror(-rc));
      }
    }
  }

 private:
  Status Flush() {
    for (;;) {
      int rc = io_uring_submit(&ring_);
      if (rc >= 0) {
        // What the kernel took of the prepared requests is in flight (any
        // left in the ring are the last prepared, or the wake poll: then
        // fewer are counted, and the destructor waits for fewer).
        const size_t left = io_uring_sq_ready(&ring_);
        const size_t sent = unsubmitted_ > left ? unsubmitted_ - left : 0;
        in_flight_ += sent;
        unsubmitted_ -= sent;
        return Status::Ok();
      }
      if (rc != -EINTR && rc != -EAGAIN)
        return Status::Errorf("io_uring_submit: %s", strerror(-rc));
    }
  }

  // user_data of the wake descriptor's poll (requests' are lane numbers).
  static constexpr uint64_t kWakeTag = ~uint64_t{0};
  // The most the destructor waits for requests in flight.
  static constexpr std::chrono::seconds kDrainWait{2};

  Status ArmWake() {
    struct io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) {
      if (Status st = Flush(); !st.ok()) return st;
      sqe = io_uring_get_sqe(&ring_);
      if (sqe == nullptr) return Status::Error("io_uring: no room for the wake poll");
    }
    io_uring_prep_poll_add(sqe, wake_fd_, POLLIN);
    io_uring_sqe_set_data64(sqe, kWakeTag);
    return Flush();
  }

  const unsigned depth_;
  int wake_fd_ = -1;
  bool woken_ = false;      // the wake descriptor fired since a blocking Wait returned
  size_t unsubmitted_ = 0;  // requests prepared, not yet taken by the kernel
  size_t in_flight_ = 0;    // requests taken by the kernel, not yet reaped (not the wake poll)
  struct io_uring ring_ = {};
  bool ready_ = false;
  pid_t owner_ = 0;  // the process that made the ring
};

// Runs each request to completion inside Submit. Loops over partial
// transfers so only a real short transfer (an error after some bytes, or end
// of file) is reported short.
class SyncQueue final : public IoQueue {
 public:
  explicit SyncQueue(unsigned depth) : depth_(depth) {}
  const char* name() const override { return "pread"; }
  unsigned depth() const override { return depth_; }
  Status RegisterBuffers(const struct iovec*, unsigned) override { return Status::Ok(); }

  Status Submit(const IoRequest* reqs, size_t count) override {
    for (size_t i = 0; i < count; ++i) done_.push_back({reqs[i].user_data, Run(reqs[i])});
    return Status::Ok();
  }

  Status Wait(size_t min, std::vector<IoCompletion>* out) override {
    if (done_.size() < min) {
      return Status::Errorf("pread queue: waiting for %zu completions, %zu outstanding", min,
                            done_.size());
    }
    out->insert(out->end(), done_.begin(), done_.end());
    done_.clear();
    return Status::Ok();
  }

  // Every request ran inside Submit: none can land later.
  size_t Abandon(std::chrono::nanoseconds, std::vector<IoCompletion>* landed) override {
    if (landed != nullptr) landed->insert(landed->end(), done_.begin(), done_.end());
    done_.clear();
    return 0;
  }

 private:
  static int64_t Run(const IoRequest& r) {
    auto* p = static_cast<uint8_t*>(r.buf);
    size_t done = 0;
    while (done < r.len) {
      ssize_t n = r.kind == IoKind::kWrite ? pwrite(r.fd, p + done, r.len - done, r.offset + done)
                                           : pread(r.fd, p + done, r.len - done, r.offset + done);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (done == 0) return -errno;
        break;
      }
      if (n == 0) break;
      done += static_cast<size_t>(n);
    }
    return static_cast<int64_t>(done);
  }

  const unsigned depth_;
  std::vector<IoCompletion> done_;
};

}  // namespace

Result<std::unique_ptr<IoQueue>> NewPosixUringQueue(unsigned depth) {
  auto q = std::make_unique<UringQueue>(depth);
  Status st = q->Init();
  if (!st.ok()) return st;
  return std::unique_ptr<IoQueue>(std::move(q));
}

std::unique_ptr<IoQueue> NewPosixSyncQueue(unsigned depth) {
  return std::make_unique<SyncQueue>(depth);
}

}  // namespace kvtier
