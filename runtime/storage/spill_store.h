// SpillStore: the disk tier. Pages are written to one anonymous file in
// KVTIER_DISK_DIR (O_TMPFILE, or unlinked at once: a crash leaves nothing),
// one page-sized slot each. Pages are sealed with AES-256-GCM on their way
// out (PageCipher, KVTIER_DISK_ENCRYPT, on by default) and every restore
// checks the tag; with encryption off they go in the clear and every
// restore verifies their XXH3-64 checksum instead. Either way each write
// reports the XXH3-64 of the page's bytes, which the owner keeps to tell
// whether a page back in memory is still its copy on disk. I/O is io_uring with O_DIRECT where the
// kernel and file system allow it, else buffered and/or pread/pwrite (io_mode() says which).
//
// Slots are handed out next-fit: the first free slot at or after a cursor
// that moves on with every allocation, so pages written one after another
// sit side by side in the file and come back in few large reads; the file
// grows only when a quarter of it or less is free, else the cursor wraps.
//
// A slot may hold the only copy of a page (the page is on the disk tier:
// disk_used_bytes) or a spare copy of a page that is back in memory and
// unchanged since (KeepAsCopy: disk_copy_bytes), which lets the page leave
// memory again without a write (Reuse). Spare copies are the owner's to give
// back when slots run short.
//
// Nothing is lost: a failed spill write leaves the page with its owner (the
// caller keeps the host copy), counts spill_errors and puts the store in a
// degraded mode with exponential backoff; a restore that fails or mismatches
// is retried once, then fails with ReadFailure::kCorruption or kIoError and
// the caller must stop the process rather than hand the bytes on.
//
// Thread-safety: every SpillStore method may be called from any thread
// (slots and backoff are under mu_, sync I/O uses a pool of per-caller
// queues). A SpillBatch belongs to one thread at a time and must be
// destroyed before its store.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/counters.h"
#include "runtime/mutex.h"
#include "runtime/status.h"
#include "runtime/storage/env.h"
#include "runtime/storage/page_cipher.h"
#include "runtime/storage/worker_pool.h"

namespace kvtier {

class SpillBatch;

enum class IoEngine : uint8_t { kAuto, kUring, kPread };

// Pages larger than this go to the device from the caller's buffer (a
// bounce buffer per queue slot would cost queue depth x page size).
constexpr size_t kMaxBouncedPage = size_t{4} << 20;
// The most one fallocate adds to the spill file.
constexpr uint64_t kMaxGrowStep = uint64_t{1} << 30;

// Requests in flight per SpillBatch unless configured: 2 MiB of them, 8 to
// 32. Sealed writes go out in groups of up to half the queue (SpillBatch),
// and a group of 1 MiB amortizes the hand-off to the sealing helpers.
unsigned DefaultQueueDepth(size_t page_size);

struct SpillStoreConfig {
  std::string dir;                     // KVTIER_DISK_DIR; created 0700 if missing
  uint64_t budget_bytes = 0;           // KVTIER_DISK_BUDGET; whole pages of it are used
  size_t page_size = size_t{2} << 20;  // KVTIER_PAGE_SIZE; a power of two >= 4 KiB
  unsigned queue_depth = 0;            // requests in flight per SpillBatch; 0: DefaultQueueDepth
  IoEngine engine = IoEngine::kAuto;   // kAuto and kUring fall back to pread if refused
  bool direct = true;                  // try O_DIRECT first (falls back to buffered)
  // Whether aligned caller buffers go to the device without the bounce copy
  // (with O_DIRECT and pages up to kMaxBouncedPage; buffered I/O and larger
  // pages never bounce aligned buffers). Writes copy by default: the bounce
  // buffers are huge pages, and O_DIRECT from 4 KiB-page sources (shmem, the
  // simulated device's memfd) reaches only ~0.7x of the device, while a
  // 2 MiB copy costs ~0.15 ms and overlaps the I/O in flight. Reads land in
  // the caller's page directly.
  bool zero_copy_writes = false;
  bool zero_copy_reads = true;
  // First fallocate step as the file grows. Later steps double the file, up
  // to kMaxGrowStep and the budget, since growing waits for all direct I/O
  // in flight; a step refused for space is retried at this size.
  uint64_t grow_bytes = uint64_t{64} << 20;
  uint64_t backoff_min_ns = 100'000'000;     // first wait after a write error
  uint64_t backoff_max_ns = 30'000'000'000;  // cap of the doubling wait
  // KVTIER_DISK_ENCRYPT: seal every page with AES-256-GCM (writes then
  // always go through the bounce buffers, where they are encrypted).
  bool encrypt = true;
  // KVTIER_DISK_CIPHER: whose AES-256-GCM seals them.
  CipherLib cipher = CipherLib::kAuto;
};

// Where a page went: its slot, and the XXH3-64 of its bytes (store both in
// the PageRecord: disk_slot and checksum). Pass the checksum back to Read:
// without encryption it is what the bytes read must hash to.
struct SpillSlot {
  uint32_t index = 0;
  uint64_t checksum = 0;
};

// Why a read failed. kCorruption and kIoError are final: the page's only
// copy cannot be restored, and the caller stops the process.
enum class ReadFailure : uint8_t {
  kNone,
  kIoError,     // the read failed twice (EIO, short read)
  kCorruption,  // the bytes read twice failed their tag (or checksum)
  kBadRequest,  // slot not in use, or len out of range: a caller bug
};

// One finished request of a SpillBatch (or of a sync Write/Read).
struct SpillCompletion {
  uint64_t tag = 0;  // the caller's tag
  IoKind kind = IoKind::kWrite;
  Status status;                             // ok, or why it failed
  SpillSlot slot;                            // write: where the page went
  ReadFailure failure = ReadFailure::kNone;  // read: why it failed
};

class SpillStore {
 public:
  // `env` (nullptr: Env::Default()) and `counters` (nullptr: private ones)
  // must outlive the store.
  static Result<std::unique_ptr<SpillStore>> Create(const SpillStoreConfig& config, Env* env,
                                                    Counters* counters);
  ~SpillStore();
  SpillStore(const SpillStore&) = delete;
  SpillStore& operator=(const SpillStore&) = delete;

  // Writes len (1..page_size) bytes from src to a free slot and waits until
  // they can be read back (no fsync: spill files die with the process
  // anyway). A 4 KiB-aligned src with len a multiple of 4 KiB goes to the
  // device directly; others are copied through a bounce buffer. Fails
  // without I/O when the budget is full or the store backs off; on a write
  // error the slot is released. In every failure the caller's copy is the
  // only one and must be kept. `place` is the page's (bound into its seal;
  // pages of no region, in tests and benchmarks, leave it {}).
  Result<SpillSlot> Write(const void* src, size_t len, PagePlace place = {});
  // Reads slot into dst and verifies it (the tag, or without encryption the
  // checksum), retrying once (an aligned dst, as for Write, is read into
  // directly). On failure dst is zeroed, never left with bad bytes;
  // *failure (optional) says why. `place` must be the one written with.
  // dst should not be memory the engine can see: read into a private buffer
  // and publish it (UFFDIO_COPY) only on success. If the I/O queue breaks
  // with the read in flight, dst may still be written after the failure
  // returns (SpillBatch::Abandon): every caller stops the process then
  // (StopOnLostPage); one that goes on must never use dst again.
  Status Read(uint32_t slot, void* dst, size_t len, uint64_t expected_checksum,
              ReadFailure* failure = nullptr, PagePlace place = {});
  // Returns the slot to the free list. The next Write may reuse it.
  void Free(uint32_t slot);
  // The page read back from `slot` stays unchanged in memory for now: the
  // slot becomes a spare copy of it (disk_used_bytes -> disk_copy_bytes).
  void KeepAsCopy(uint32_t slot);
  // The page left memory again without a write: its spare copy in `slot`
  // is its only copy once more (disk_copy_bytes -> disk_used_bytes).
  void Reuse(uint32_t slot);

  // In a fork child only, before CloseInForkChild: reads a whole page of
  // `slot` into page-aligned dst with pread (the parent's io_uring queues
  // and locks are not the child's to use) and verifies it as Read does,
  // trying twice. Through the Env's synchronous queue: the production one
  // takes no lock and allocates (malloc is usable in a fork child); a
  // FaultEnv (KVTIER_DISK_FAULTS, tests) takes its own locks, which a fork
  // may have caught held. The caller keeps the parent from reusing the slot
  // meanwhile.
  Status ReadInForkChild(uint32_t slot, void* dst, uint64_t expected_checksum,
                         PagePlace place) const;
  // In a fork child: closes the child's descriptor of the spill file, so a
  // long-lived child holds none of the parent's disk space.
  void CloseInForkChild();

  // A pipelined batch with queue_depth requests in flight (or `depth`), for
  // the mover and the restore pipeline.
  Result<std::unique_ptr<SpillBatch>> NewBatch();
  Result<std::unique_ptr<SpillBatch>> NewBatch(unsigned depth);

  // For the process's exit, after the runtime's shutdown (nothing is
  // destroyed then: other threads may still run): an encrypting store wipes
  // its key and takes no more writes. A page read after it cannot be
  // opened: StopOnLostPage then ends the process with `status`, the status
  // it is exiting with. A store in the clear is left as it is.
  void WipeKeyAtExit(int status);
  // Whether WipeKeyAtExit wiped the key; the status it was given.
  bool exiting(int* status) const;

  // False while the store backs off after a write error (then Write fails
  // at once), true again from the retry time on (a success clears it);
  // false for good after WipeKeyAtExit.
  bool writable(uint64_t now_ns) const;
  bool writable() const { return writable(env_->NowNanos()); }

  // "io_uring+direct", "io_uring" (buffered), "pread+direct" or "pread"
  // (buffered): fits the stats segment's disk_io field.
  const char* io_mode() const;
  size_t page_size() const { return config_.page_size; }
  uint32_t capacity_slots() const { return max_slots_; }
  // Slots holding a page's only copy or a spare one; spare ones alone.
  uint32_t used_slots() const;
  uint32_t copy_slots() const;
  // Whether pages are sealed with AES-256-GCM (KVTIER_DISK_ENCRYPT).
  bool encrypts() const { return cipher_ != nullptr; }
  const PageCipher* cipher() const { return cipher_.get(); }
  // Names the spill file in messages ("unlinked O_TMPFILE in /var/tmp/kvtier, fd 7").
  const std::string& file_description() const { return file_desc_; }
  // The spill file's descriptor, for tests that look at its raw blocks.
  int file_fd_for_testing() const { return fd_; }
  Env* env() const { return env_; }

 private:
  friend class SpillBatch;
  SpillStore(const SpillStoreConfig& config, Env* env, Counters* counters);
  Status Open();
  Status Probe(IoQueue* queue);
  Result<std::unique_ptr<IoQueue>> NewQueue(unsigned depth);
  Status SetUpEncryption();

  // Slot life cycle, used by SpillBatch.
  Result<uint32_t> AcquireSlot();
  // Whether aligned buffers of `kind` still go through the bounce buffers.
  bool Bounces(IoKind kind) const;
  void ReleaseSlot(uint32_t slot);  // after a failed write
  bool SlotInUse(uint32_t slot) const;
  void OnWriteDone(size_t len);
  void OnWriteFailed(const std::string& why);
  void EnterDegradedLocked(uint64_t now_ns, const std::string& why) REQUIRES(mu_);
  uint64_t SlotOffset(uint32_t slot) const { return uint64_t{slot} * config_.page_size; }

  // With encryption, per slot: its write generation and the tag of its page.
  // A slot's entry is the writer's from AcquireSlot until the write's
  // completion is booked, then read-only until the slot is written again;
  // the owners' locks order those steps.
  struct SlotSeal {
    uint64_t generation = 0;
    uint8_t tag[kSealTagBytes] = {};
  };
  // Seals len bytes of src into dst as the next generation of `slot`.
  Status SealPage(uint32_t slot, PagePlace place, const uint8_t* src, uint8_t* dst, size_t len);
  // Opens len bytes of `slot` in place (data), read back for `place`.
  Status OpenPage(uint32_t slot, PagePlace place, uint8_t* data, size_t len) const;

  std::unique_ptr<SpillBatch> AcquireSyncBatch(Status* error);
  void ReleaseSyncBatch(std::unique_ptr<SpillBatch> batch);

  const SpillStoreConfig config_;
  Env* const env_;
  std::unique_ptr<Counters> own_counters_;
  Counters* const counters_;
  int fd_ = -1;
  bool direct_ = false;
  bool uring_ = false;
  int io_mode_code_ = 0;  // index into the io_mode() names
  std::string file_desc_;
  uint32_t max_slots_ = 0;
  std::unique_ptr<PageCipher> cipher_;  // null without encryption
  SlotSeal* seals_ = nullptr;           // max_slots_ of them, reserved, not committed
  // Seals and opens (and checksums) pages of a batch in parallel; with no
  // helpers when pages go in the clear.
  std::unique_ptr<WorkerPool> workers_;

  mutable Mutex mu_;
  std::vector<bool> in_use_ GUARDED_BY(mu_);
  std::vector<bool> copy_ GUARDED_BY(mu_);  // in use as a spare copy (KeepAsCopy)
  uint32_t next_slot_ GUARDED_BY(mu_) = 0;  // slots >= this were never used
  uint32_t cursor_ GUARDED_BY(mu_) = 0;     // next-fit: where the next search starts
  uint32_t used_slots_ GUARDED_BY(mu_) = 0;
  uint32_t copy_slots_ GUARDED_BY(mu_) = 0;
  uint64_t file_bytes_ GUARDED_BY(mu_) = 0;  // bytes reserved with fallocate
  bool degraded_ GUARDED_BY(mu_) = false;
  std::atomic<bool> exiting_{false};  // WipeKeyAtExit ran
  std::atomic<int> exit_status_{0};
  uint64_t retry_at_ns_ GUARDED_BY(mu_) = 0;
  uint64_t backoff_ns_ GUARDED_BY(mu_) = 0;
  std::string last_error_ GUARDED_BY(mu_);

  Mutex pool_mu_;
  std::vector<std::unique_ptr<SpillBatch>> idle_sync_ GUARDED_BY(pool_mu_);
};

}  // namespace kvtier
