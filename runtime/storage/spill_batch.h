// SpillBatch: pipelined spill writes and restore reads for the mover. Queue
// any number of requests, Submit() starts up to the queue depth of them, and
// Wait() refills the queue as completions arrive, so the device always has
// work while the CPU seals (or copies) and checksums the pages around it.
// Each read is verified (its tag, or its checksum without encryption) and
// retried once (see SpillStore::Read).
//
// Bounce buffers (one huge-page-backed page each, registered with io_uring)
// are set up with the batch when its store bounces aligned buffers (writes,
// by default; SpillStoreConfig says why), else on first need (a misaligned
// buffer). Aligned read destinations take the data directly.
//
// Thread-safety: single-owner; one thread at a time. Destroy before the store.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "runtime/status.h"
#include "runtime/storage/env.h"
#include "runtime/storage/spill_store.h"

namespace kvtier {

class SpillBatch {
 public:
  // Waits for requests in flight (their buffers are ours), or gives a
  // broken queue up (Abandon); the slots of writes whose completion no
  // caller took are given back.
  ~SpillBatch();
  SpillBatch(const SpillBatch&) = delete;
  SpillBatch& operator=(const SpillBatch&) = delete;

  // Queues a spill of len (1..page_size) bytes of the page at `place`; src
  // must stay unchanged until the request completes.
  void AddWrite(const void* src, size_t len, uint64_t tag, PagePlace place = {});
  // Queues a restore of `slot` into dst (see SpillStore::Read).
  void AddRead(uint32_t slot, void* dst, size_t len, uint64_t checksum, uint64_t tag,
               PagePlace place = {});
  // Queues one read of `pages` whole pages from slots slot..slot+pages-1
  // into dst (page aligned, pages x the page size), each verified against
  // checksums[i] (kept by the caller until the completion), or with
  // encryption its tag as the page first.Next(i); a page that does not match
  // has the whole run read again once. One completion for the run; a run the
  // store would bounce fails at once as kBadRequest (read its pages one by
  // one then).
  void AddReadRun(uint32_t slot, uint32_t pages, void* dst, const uint64_t* checksums, uint64_t tag,
                  PagePlace first = {});
  // Starts queued requests, up to the queue depth in flight; does not wait.
  // (Where io_uring is refused the pread queue runs them here.)
  void Submit();
  // Waits until at least `min` requests have completed since the last Wait
  // (capped at outstanding()), then appends every completed one to out.
  // Fails only if the I/O queue itself breaks (what completed is still
  // appended; drop the batch then).
  Status Wait(size_t min, std::vector<SpillCompletion>* out);
  Status WaitAll(std::vector<SpillCompletion>* out) { return Wait(outstanding(), out); }
  // Waits until a request completes or the wake descriptor is written (new
  // work for the caller), then appends every completed one (maybe none).
  Status WaitAny(std::vector<SpillCompletion>* out);
  // Gives the batch up after Wait or WaitAny failed (its queue broke):
  // waits at most kDrainWait for the requests in flight, and returns the
  // tags of reads that may still write their destination after it (none
  // when all came back). The caller reads those pages again into other
  // buffers and never uses those destinations again (KeepForever). No
  // completion of what was in flight is reported; the slot of a write that
  // may still land is never handed out again (its source may be reused:
  // the slot is never read). Then drop the batch.
  std::vector<uint64_t> Abandon();
  // The eventfd that ends a WaitAny early (see IoQueue::SetWakeFd).
  Status SetWakeFd(int fd);
  // Queued + in flight + completed but not yet returned by Wait.
  size_t outstanding() const { return queued_.size() + in_flight_ + done_.size(); }
  unsigned depth() const { return depth_; }

 private:
  friend class SpillStore;
  struct Op {
    IoKind kind = IoKind::kWrite;
    const void* src = nullptr;  // write
    void* dst = nullptr;        // read
    size_t len = 0;
    uint64_t tag = 0;
    uint32_t slot = 0;
    uint64_t checksum = 0;                // read: expected; write: computed
    uint32_t pages = 1;                   // read: whole pages of a run (AddReadRun)
    const uint64_t* checksums = nullptr;  // a run's, one per page
    PagePlace place;                      // of the (first) page
    int attempts = 0;
    bool bounce = false;  // the I/O goes through bounce_[lane]
    uint32_t io_len = 0;  // len rounded up for O_DIRECT
  };

  // The most Abandon waits for a broken queue's requests in flight.
  static constexpr std::chrono::seconds kDrainWait{2};

  SpillBatch(SpillStore* store, std::unique_ptr<IoQueue> queue, unsigned depth);
  bool NeedsBounce(IoKind kind, const void* p, size_t len) const;
  Status EnsureBounce();
  // Prepares op for lane `lane` and appends its request; or completes it at
  // once (budget full, backoff, bad request).
  void Start(Op op, unsigned lane, std::vector<IoRequest>* reqs);
  IoRequest RequestFor(const Op& op, unsigned lane) const;
  // Handles a completion; appends a retry request instead when one is due.
  void Finish(unsigned lane, int64_t result, std::vector<IoRequest>* retries);
  void FinishWrite(unsigned lane, int64_t result);
  // Verifies (and with encryption decrypts in place) a read that moved
  // `result` bytes to `data`: completes it and returns true if the page is
  // good, else counts why and returns false.
  // `checked`, when given, is what CheckPages said of all its pages.
  bool CheckRead(const Op& op, uint8_t* data, int64_t result, ReadFailure* why, std::string* detail,
                 const std::string* checked = nullptr);
  // Verifies (opens) page `i` of a read into data: "" if it is good, else
  // why not. Pure but for the page's bytes: callers run it on many threads.
  std::string CheckPage(const Op& op, uint8_t* data, uint32_t i) const;
  // CheckPage for every page of every op, spread over the store's workers:
  // per op, "" or why its first bad page is bad.
  std::vector<std::string> CheckPages(const std::vector<Op>& ops);
  // Seals the writes of `lanes` into their bounce buffers (in parallel
  // unless SealsInline) and computes their checksums; a write that cannot
  // be sealed completes as failed and its request leaves `reqs`. Then
  // submits reqs (false: the queue refused them).
  bool SealAndSubmit(std::vector<unsigned>* lanes, std::vector<IoRequest>* reqs);
  // How many sealed writes go out together.
  size_t SealGroup() const;
  // Whether this thread seals them itself (a cipher about as fast as a
  // copy), not spread over the store's helpers.
  bool SealsInline() const;
  // True (and counted) if the read may be tried once more.
  bool TakeRetry(Op& op, const std::string& detail);
  // Completes a read that failed twice; zeroes its destination.
  void FailRead(const Op& op, ReadFailure why, const std::string& detail);
  void Complete(unsigned lane, SpillCompletion c);
  // "spill slot 3 (offset 6291456 of the <file>, 2097152 bytes)", for messages.
  std::string Where(const Op& op) const;
  // False when the queue refused them (each is then completed as failed).
  bool SubmitRequests(std::vector<IoRequest>* reqs);
  void TakeDone(std::vector<SpillCompletion>* out);
  // Handles the completions already there without waiting; true if that
  // freed a lane.
  bool ReapReady();
  // Waits for at least one completion and handles it; resubmits retries and,
  // with `refill`, starts queued requests.
  Status Pump(bool refill);
  // Pump(true); if the queue broke, hands what completed to `out` and says
  // which queue.
  Status PumpOrHandOver(std::vector<SpillCompletion>* out);

  SpillStore* const store_;
  std::unique_ptr<IoQueue> queue_;
  const unsigned depth_;
  std::deque<Op> queued_;
  std::vector<Op> lanes_;  // lane i holds the request with user_data i
  std::vector<unsigned> free_lanes_;
  size_t in_flight_ = 0;
  std::vector<SpillCompletion> done_;
  std::vector<AlignedBuffer> bounce_;  // empty until first needed
  // Completions a failed Wait returned with its error (Abandon: they landed).
  std::vector<IoCompletion> reaped_at_break_;
  bool fixed_ = false;  // bounce_ registered with the queue
};

}  // namespace kvtier
