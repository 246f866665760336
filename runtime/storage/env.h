// Env: the storage seam. Every file and I/O system call of the disk tier goes
// through it (directory creation, anonymous spill files, fallocate, queued
// reads and writes, the clock), so tests can swap in FaultEnv and nothing else
// in kvtier includes liburing.
//
// Thread-safety: Env methods may be called from any thread. An IoQueue is
// single-owner: one thread at a time submits to it and waits on it.
#pragma once

#include <sys/uio.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/status.h"

namespace kvtier {

enum class IoKind : uint8_t { kRead, kWrite };

struct IoRequest {
  IoKind kind = IoKind::kRead;
  int fd = -1;
  void* buf = nullptr;
  uint32_t len = 0;
  uint64_t offset = 0;
  int buf_index = -1;  // registered buffer that holds buf, or -1
  uint64_t user_data = 0;
};

struct IoCompletion {
  uint64_t user_data = 0;
  int64_t result = 0;  // bytes transferred (may be short), or -errno
};

// A bounded queue of file reads and writes: io_uring, or pread/pwrite run
// synchronously at Submit where io_uring is unavailable.
class IoQueue {
 public:
  virtual ~IoQueue() = default;
  virtual const char* name() const = 0;  // "io_uring" or "pread"
  virtual unsigned depth() const = 0;
  // Registers buffers for fixed-buffer I/O (pinned once, not per request).
  // Fails where the kernel or RLIMIT_MEMLOCK refuses; requests then keep
  // buf_index = -1.
  virtual Status RegisterBuffers(const struct iovec* iovs, unsigned count) = 0;
  // Starts the requests. The caller keeps at most depth() in flight.
  virtual Status Submit(const IoRequest* reqs, size_t count) = 0;
  // Waits until at least `min` completions are available (min must not
  // exceed the requests in flight), or until the wake descriptor (below)
  // is written, and appends every available one to out.
  virtual Status Wait(size_t min, std::vector<IoCompletion>* out) = 0;
  // An eventfd that another thread writes to end a Wait early (new work
  // for the queue's owner). The queue reads it empty when it fires. A
  // queue whose Wait never blocks (pread) ignores it.
  virtual Status SetWakeFd(int fd) { return Status::Ok(); }
  // Gives the queue up after it broke: waits at most `limit` for the
  // requests in flight, appends those that come back to `landed`, and
  // returns how many it counts as still in flight (an estimate: a request
  // not in `landed` may still complete). Each that does writes its buffer
  // (a read) or its file range (a write; its source is only read) whenever
  // it completes: the owner never uses those buffers and ranges again. The
  // owner uses the queue no more; destroying it then waits for nothing.
  virtual size_t Abandon(std::chrono::nanoseconds limit, std::vector<IoCompletion>* landed) = 0;
};

class Env {
 public:
  virtual ~Env() = default;
  // The production Env (POSIX + liburing); lives for the whole process.
  static Env* Default();

  // Creates `dir` (and missing parents) with mode 0700; ok if it already is
  // a directory.
  virtual Status CreateDir(const std::string& dir) = 0;
  // Opens an anonymous O_TMPFILE file in dir: it never has a name, so a
  // crash leaves nothing behind.
  virtual Result<int> OpenTmpFile(const std::string& dir, bool direct) = 0;
  // For file systems without O_TMPFILE: creates a uniquely named file in dir
  // and unlinks it before returning.
  virtual Result<int> OpenUnlinkedFile(const std::string& dir, bool direct) = 0;
  // Reserves [offset, offset+len) of the file so later writes do not run
  // out of space half way. Ok (a no-op) where the file system has no
  // fallocate: writes then extend the file and report ENOSPC themselves.
  virtual Status Allocate(int fd, uint64_t offset, uint64_t len) = 0;
  virtual void Close(int fd) = 0;
  virtual Result<std::unique_ptr<IoQueue>> NewUringQueue(unsigned depth) = 0;
  virtual std::unique_ptr<IoQueue> NewSyncQueue(unsigned depth) = 0;
  // Monotonic nanoseconds (backoff timing).
  virtual uint64_t NowNanos() = 0;
  // The text of a small file of the system's (/proc, a cgroup's files: the
  // memory wall, runtime/memory_wall.h), at most max_bytes of it. Fails with
  // the path and errno's words ("No such file or directory" when absent).
  virtual Result<std::string> ReadFile(const std::string& path, size_t max_bytes) = 0;
};

// Memory aligned for O_DIRECT (4 KiB; 2 MiB and transparent huge pages when
// the size allows), zero-filled, a mapping of its own placed on kvtier's
// NUMA node (runtime/numa_place.h). Move-only.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  static Result<AlignedBuffer> Allocate(size_t bytes);
  AlignedBuffer(AlignedBuffer&& other) noexcept { *this = std::move(other); }
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer();

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

  // Bytes of every AlignedBuffer alive in this process: kvtier's own I/O
  // buffers and the page copies it keeps (the stats' buffer_bytes).
  static uint64_t live_bytes();
  static uint64_t peak_bytes();  // the most live_bytes has been

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Keeps `buffer` alive, unused, until the process ends: a read of a queue
// given up (IoQueue::Abandon) may still write it. Counted in live_bytes.
void KeepForever(AlignedBuffer buffer);

// The alignment O_DIRECT needs for buffers, offsets and lengths. 4 KiB covers
// every common logical block size.
constexpr size_t kDirectAlign = 4096;
inline size_t AlignUp(size_t n, size_t a) { return (n + a - 1) / a * a; }
inline bool IsAligned(const void* p, size_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

}  // namespace kvtier
