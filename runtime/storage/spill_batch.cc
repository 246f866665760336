// SpillBatch: the request pipeline shared by the mover's batches and the
// store's synchronous Write/Read. Thread-safety: single-owner (see header).
#include "runtime/storage/spill_batch.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <algorithm>
#include <atomic>

#include "runtime/log.h"
#include "runtime/storage/checksum.h"

namespace kvtier {

SpillBatch::SpillBatch(SpillStore* store, std::unique_ptr<IoQueue> queue, unsigned depth)
    : store_(store), queue_(std::move(queue)), depth_(depth), lanes_(depth) {
  for (unsigned i = depth; i-- > 0;) free_lanes_.push_back(i);
}

SpillBatch::~SpillBatch() {
  // Finish what the device holds so no buffer is freed under a request;
  // never start what is only queued. A queue that broke is given up.
  queued_.clear();
  while (in_flight_ > 0 && Pump(false).ok()) {
  }
  if (in_flight_ > 0) (void)Abandon();
  queue_.reset();  // unregisters the bounce buffers
  // Nobody will learn where these pages went: give their slots back.
  for (const SpillCompletion& c : done_) {
    if (c.kind == IoKind::kWrite && c.status.ok()) store_->Free(c.slot.index);
  }
}

std::vector<uint64_t> SpillBatch::Abandon() {
  queued_.clear();
  if (in_flight_ == 0) return {};
  std::vector<bool> busy(lanes_.size(), true);
  for (unsigned lane : free_lanes_) busy[lane] = false;
  // What came back (before the break, or while the queue drains) is not
  // looked at (the caller reads it again): those requests can write nothing
  // more. Every other busy lane may still land, whatever the queue counts
  // (its count of requests in flight is an estimate, one low after a short
  // submit).
  std::vector<IoCompletion> landed = std::move(reaped_at_break_);
  reaped_at_break_.clear();
  (void)queue_->Abandon(kDrainWait, &landed);
  std::vector<bool> may_land(lanes_.size(), true);
  for (const IoCompletion& c : landed) {
    if (c.user_data < may_land.size()) may_land[c.user_data] = false;
  }
  size_t left = 0;
  std::vector<uint64_t> unsafe;
  bool keep_bounce = false;
  size_t kept_slots = 0;
  for (unsigned lane = 0; lane < lanes_.size(); ++lane) {
    if (!busy[lane]) continue;
    const Op& op = lanes_[lane];
    if (!may_land[lane]) {
      // Done, but nobody learned where its page went: the slot goes back.
      if (op.kind == IoKind::kWrite) store_->ReleaseSlot(op.slot);
      free_lanes_.push_back(lane);
      continue;
    }
    ++left;
    if (op.kind == IoKind::kWrite) {
      // It may still write its slot: the slot is never handed out again.
      // (Its source is the caller's, and may be used again: what the write
      // then carries goes to a slot nothing reads.)
      ++kept_slots;
      keep_bounce = keep_bounce || op.bounce;
    } else if (op.bounce) {
      keep_bounce = true;  // op.dst is written only from the bounce buffer, here
    } else {
      unsafe.push_back(op.tag);
    }
    free_lanes_.push_back(lane);
  }
  in_flight_ = 0;
  if (left > 0) {
    Log(0,
        "disk tier: a broken I/O queue of the %s still had %zu requests in flight when given up; "
        "their read buffers are never used again (%zu reads) and %zu spill slots are never handed "
        "out again",
        store_->file_description().c_str(), left, unsafe.size(), kept_slots);
  }
  if (keep_bounce) {
    for (AlignedBuffer& b : bounce_) KeepForever(std::move(b));
    bounce_.clear();
  }
  return unsafe;
}

void SpillBatch::AddWrite(const void* src, size_t len, uint64_t tag, PagePlace place) {
  Op op;
  op.kind = IoKind::kWrite;
  op.src = src;
  op.len = len;
  op.tag = tag;
  op.place = place;
  queued_.push_back(op);
}

void SpillBatch::AddRead(uint32_t slot, void* dst, size_t len, uint64_t checksum, uint64_t tag,
                         PagePlace place) {
  Op op;
  op.kind = IoKind::kRead;
  op.dst = dst;
  op.len = len;
  op.tag = tag;
  op.slot = slot;
  op.checksum = checksum;
  op.place = place;
  queued_.push_back(op);
}

void SpillBatch::AddReadRun(uint32_t slot, uint32_t pages, void* dst, const uint64_t* checksums,
                            uint64_t tag, PagePlace first) {
  Op op;
  op.kind = IoKind::kRead;
  op.dst = dst;
  op.len = size_t{pages} * store_->page_size();
  op.tag = tag;
  op.slot = slot;
  op.pages = pages;
  op.checksums = checksums;
  op.place = first;
  op.checksum = pages > 0 && checksums ? checksums[0] : 0;
  queued_.push_back(op);
}

void SpillBatch::Submit() {
  std::vector<IoRequest> reqs;
  std::vector<unsigned> unhashed;  // zero-copy writes, hashed once submitted below
  std::vector<unsigned> to_seal;   // sealed writes started, sealed together before they go
  for (;;) {
    if (queued_.empty()) break;
    if (free_lanes_.empty()) {
      // Writes waiting for their seal go first: what is in flight may not
      // complete soon enough to free a lane for them.
      if (!to_seal.empty()) {
        if (!SealAndSubmit(&to_seal, &reqs)) break;
        continue;
      }
      // Requests that finished while this thread copied and checksummed
      // free their lanes now, not at the next Pump: one thread keeps the
      // device fed.
      if (!ReapReady()) break;
      continue;
    }
    unsigned lane = free_lanes_.back();
    free_lanes_.pop_back();
    Op op = queued_.front();
    queued_.pop_front();
    size_t before = reqs.size();
    Start(op, lane, &reqs);
    if (reqs.size() == before || reqs.back().kind != IoKind::kWrite) continue;
    if (!lanes_[lane].bounce) {
      unhashed.push_back(lane);
      continue;
    }
    if (store_->encrypts()) {
      // A group (SealGroup) is sealed at once across the threads.
      to_seal.push_back(lane);
      if (to_seal.size() < SealGroup() && !queued_.empty() && !free_lanes_.empty()) continue;
      if (!SealAndSubmit(&to_seal, &reqs)) break;
      continue;
    }
    // A bounced write goes to the device as soon as it is copied, and is
    // checksummed while the device moves it (both only read the buffer),
    // before any completion is reaped: its completion needs the checksum.
    // If the queue refuses it, the rest waits for the next Submit.
    if (!SubmitRequests(&reqs)) break;
    Op& written = lanes_[lane];
    written.checksum = PageChecksum(bounce_[lane].data(), written.len);
  }
  if (!to_seal.empty()) {
    SealAndSubmit(&to_seal, &reqs);
  } else {
    SubmitRequests(&reqs);
  }
  // A write the queue refused has completed already and left its lane.
  for (unsigned lane : unhashed) {
    if (std::find(free_lanes_.begin(), free_lanes_.end(), lane) != free_lanes_.end()) continue;
    Op& op = lanes_[lane];
    op.checksum = PageChecksum(op.src, op.len);
  }
}

bool SpillBatch::SealsInline() const { return store_->cipher()->seals_at_copy_speed(); }

bool SpillBatch::SealAndSubmit(std::vector<unsigned>* lanes, std::vector<IoRequest>* reqs) {
  std::vector<Status> sealed(lanes->size());
  auto seal = [&](size_t k) {
    const unsigned lane = (*lanes)[k];
    Op& op = lanes_[lane];
    uint8_t* b = bounce_[lane].data();
    const auto* src = static_cast<const uint8_t*>(op.src);
    sealed[k] = store_->SealPage(op.slot, op.place, src, b, op.len);
    memset(b + op.len, 0, op.io_len - op.len);  // O_DIRECT tail of a short page
    // The checksum is of the bytes in the clear: the owner's test for a
    // copy on SSD that is still current.
    op.checksum = PageChecksum(src, op.len);
  };
  if (SealsInline()) {
    for (size_t k = 0; k < lanes->size(); ++k) seal(k);
  } else {
    store_->workers_->Run(lanes->size(), seal);
  }
  for (size_t k = 0; k < lanes->size(); ++k) {
    if (sealed[k].ok()) continue;
    const unsigned lane = (*lanes)[k];
    std::erase_if(*reqs, [lane](const IoRequest& r) { return r.user_data == lane; });
    store_->ReleaseSlot(lanes_[lane].slot);
    SpillCompletion c;
    c.tag = lanes_[lane].tag;
    c.kind = IoKind::kWrite;
    c.status = sealed[k].Annotate("spill write");
    Complete(lane, std::move(c));
  }
  lanes->clear();
  return SubmitRequests(reqs);
}

bool SpillBatch::ReapReady() {
  if (in_flight_ == 0) return false;
  std::vector<IoCompletion> comps;
  // Wait(0) only collects what has completed; it does not block or fail.
  if (!queue_->Wait(0, &comps).ok() || comps.empty()) return false;
  std::vector<IoRequest> retries;
  for (const IoCompletion& c : comps) {
    --in_flight_;
    Finish(static_cast<unsigned>(c.user_data), c.result, &retries);
  }
  SubmitRequests(&retries);
  return !free_lanes_.empty();
}

Status SpillBatch::Wait(size_t min, std::vector<SpillCompletion>* out) {
  Submit();
  if (min > outstanding()) min = outstanding();
  while (done_.size() < min) {
    if (in_flight_ == 0) {
      Submit();  // only requests that completed at once (refusals) ran so far
      continue;
    }
    if (Status st = PumpOrHandOver(out); !st.ok()) return st;
  }
  TakeDone(out);
  return Status::Ok();
}

Status SpillBatch::WaitAny(std::vector<SpillCompletion>* out) {
  Submit();
  if (done_.empty() && in_flight_ > 0) {
    // Returns after a completion or a wake; refills the queue either way.
    if (Status st = PumpOrHandOver(out); !st.ok()) return st;
  }
  TakeDone(out);
  return Status::Ok();
}

Status SpillBatch::PumpOrHandOver(std::vector<SpillCompletion>* out) {
  Status st = Pump(true);
  if (st.ok()) return st;
  // What completed is still the caller's (slots of finished writes).
  TakeDone(out);
  return st.Annotate("spill I/O queue (" + store_->file_description() + ")");
}

Status SpillBatch::SetWakeFd(int fd) { return queue_->SetWakeFd(fd); }

void SpillBatch::TakeDone(std::vector<SpillCompletion>* out) {
  for (SpillCompletion& c : done_) out->push_back(std::move(c));
  done_.clear();
}

size_t SpillBatch::SealGroup() const {
  // intel-ipsec-mb with VAES seals a page about as fast as the store in the
  // clear copies one (12-20 GB/s a core here): this thread seals 256 KiB
  // (at least a page) and submits it, with no hand-off to the helpers.
  // With 64 KiB pages, groups of one page wrote 0.93x the store in the
  // clear at 0.15 s of CPU per GB (a submit each), groups of 4 1.07-1.21x
  // at 0.12 (the clear store: 0.11), groups of 16 0.96-1.09x.
  if (SealsInline()) {
    return std::clamp<size_t>((size_t{256} << 10) / store_->page_size(), 1,
                              std::max<unsigned>(depth_ / 2, 1));
  }
  // Other code (OpenSSL's, or intel-ipsec-mb's without VAES) is about a
  // quarter as fast. With nothing in flight, a page a thread: the device
  // starts soon. Then 1 MiB (at least a page a thread): the hand-off to a
  // helper costs about as much as sealing 64 KiB, and with groups of 4 such
  // pages the sealed store wrote 0.5-0.8x the store in the clear at depth 32
  // here, with groups of 16 0.8-1.2x. At most half the queue, so that the
  // other half keeps the device busy meanwhile.
  const size_t width = store_->workers_->width();
  const size_t pages =
      in_flight_ == 0 ? width : std::max((size_t{1} << 20) / store_->page_size(), width);
  return std::min<size_t>(std::max<unsigned>(depth_ / 2, 1), pages);
}

Status SpillBatch::Pump(bool refill) {
  std::vector<IoCompletion> comps;
  // Sealed writes go out in groups: wait until a group's lanes are free, so
  // the helpers seal it at once while the rest is in flight.
  size_t want = 1;
  if (refill && store_->encrypts() && !queued_.empty() && queued_.front().kind == IoKind::kWrite &&
      free_lanes_.size() < SealGroup()) {
    want = std::clamp<size_t>(SealGroup() - free_lanes_.size(), 1, in_flight_);
  }
  Status st = queue_->Wait(want, &comps);
  if (!st.ok()) {
    // Those came back before the break: Abandon knows they are done.
    reaped_at_break_.insert(reaped_at_break_.end(), comps.begin(), comps.end());
    return st;
  }
  std::vector<IoRequest> retries;
  // Reads that landed in the caller's buffer free their lane at once and are
  // verified after the queue is refilled, so the device is not left idle
  // while the CPU checksums them.
  std::vector<Op> verify;
  for (const IoCompletion& c : comps) {
    --in_flight_;
    auto lane = static_cast<unsigned>(c.user_data);
    const Op& op = lanes_[lane];
    if (refill && op.kind == IoKind::kRead && !op.bounce && c.result == op.io_len) {
      verify.push_back(op);
      free_lanes_.push_back(lane);
    } else {
      Finish(lane, c.result, &retries);
    }
  }
  SubmitRequests(&retries);
  if (refill) Submit();
  const std::vector<std::string> checked = CheckPages(verify);
  for (size_t k = 0; k < verify.size(); ++k) {
    Op& op = verify[k];
    ReadFailure why;
    std::string detail;
    if (CheckRead(op, static_cast<uint8_t*>(op.dst), op.io_len, &why, &detail, &checked[k])) {
      continue;
    }
    if (TakeRetry(op, detail)) {
      queued_.push_front(op);  // started by the next Submit
    } else {
      FailRead(op, why, detail);
    }
  }
  return Status::Ok();
}

bool SpillBatch::NeedsBounce(IoKind kind, const void* p, size_t len) const {
  if (kind == IoKind::kWrite && store_->encrypts()) return true;  // sealed into it
  if (!store_->direct_) return false;                             // buffered I/O takes any buffer
  if (!IsAligned(p, kDirectAlign) || len % kDirectAlign != 0) return true;
  return store_->Bounces(kind);
}

Status SpillBatch::EnsureBounce() {
  if (!bounce_.empty()) return Status::Ok();
  std::vector<AlignedBuffer> buffers;
  std::vector<struct iovec> iovs;
  for (unsigned i = 0; i < depth_; ++i) {
    Result<AlignedBuffer> b = AlignedBuffer::Allocate(AlignUp(store_->page_size(), kDirectAlign));
    if (!b.ok()) return b.status();
    iovs.push_back({b.value().data(), b.value().size()});
    buffers.push_back(std::move(b).value());
  }
  Status reg = queue_->RegisterBuffers(iovs.data(), static_cast<unsigned>(iovs.size()));
  fixed_ = reg.ok();
  if (!fixed_) {
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true))
      Log(1, "disk tier: %s; using unregistered buffers", reg.message().c_str());
  }
  bounce_ = std::move(buffers);
  return Status::Ok();
}

void SpillBatch::Start(Op op, unsigned lane, std::vector<IoRequest>* reqs) {
  SpillCompletion c;
  c.tag = op.tag;
  c.kind = op.kind;
  size_t page = store_->page_size();
  if (op.len == 0 || op.len > page * op.pages || op.pages == 0 ||
      (op.pages > 1 &&
       (op.kind != IoKind::kRead || op.checksums == nullptr || op.len != page * op.pages))) {
    c.status = Status::Errorf("spill request of %zu bytes: must be 1..%zu bytes (the page size)",
                              op.len, page);
    if (op.kind == IoKind::kRead) c.failure = ReadFailure::kBadRequest;
    return Complete(lane, std::move(c));
  }
  if (op.kind == IoKind::kWrite) {
    Result<uint32_t> slot = store_->AcquireSlot();
    if (!slot.ok()) {
      c.status = slot.status();
      return Complete(lane, std::move(c));
    }
    op.slot = slot.value();
    op.bounce = NeedsBounce(op.kind, op.src, op.len);
  } else {
    for (uint32_t i = 0; i < op.pages; ++i) {
      if (!store_->SlotInUse(op.slot + i)) {
        c.status = Status::Errorf(
            "restore of spill slot %u: the slot is not in use (freed or never written)",
            op.slot + i);
        c.failure = ReadFailure::kBadRequest;
        return Complete(lane, std::move(c));
      }
    }
    op.bounce = NeedsBounce(op.kind, op.dst, op.len);
    if (op.bounce && op.pages > 1) {
      c.status = Status::Error("a run of restores needs an aligned destination read directly");
      c.failure = ReadFailure::kBadRequest;
      return Complete(lane, std::move(c));
    }
  }
  if (op.bounce) {
    Status st = EnsureBounce();
    if (!st.ok()) {
      if (op.kind == IoKind::kWrite) store_->ReleaseSlot(op.slot);
      c.status = st;
      c.failure = op.kind == IoKind::kRead ? ReadFailure::kIoError : ReadFailure::kNone;
      return Complete(lane, std::move(c));
    }
  }
  op.io_len = static_cast<uint32_t>(store_->direct_ ? AlignUp(op.len, kDirectAlign) : op.len);
  if (op.kind == IoKind::kWrite && op.bounce) {
    uint8_t* b = bounce_[lane].data();
    // Sealed pages are sealed into it by SealAndSubmit, in parallel.
    if (!store_->encrypts()) {
      memcpy(b, op.src, op.len);
      memset(b + op.len, 0, op.io_len - op.len);  // O_DIRECT tail of a short page
    }
  }
  op.attempts = std::max(op.attempts, 1);  // a retry keeps its count
  lanes_[lane] = op;
  reqs->push_back(RequestFor(op, lane));
}

IoRequest SpillBatch::RequestFor(const Op& op, unsigned lane) const {
  IoRequest r;
  r.kind = op.kind;
  r.fd = store_->fd_;
  if (op.bounce) {
    r.buf = bounce_[lane].data();
    r.buf_index = fixed_ ? static_cast<int>(lane) : -1;
  } else {
    r.buf = op.kind == IoKind::kWrite ? const_cast<void*>(op.src) : op.dst;
  }
  r.len = op.io_len;
  r.offset = store_->SlotOffset(op.slot);
  r.user_data = lane;
  return r;
}

bool SpillBatch::SubmitRequests(std::vector<IoRequest>* reqs) {
  if (reqs->empty()) return true;
  Status st = queue_->Submit(reqs->data(), reqs->size());
  if (st.ok()) {
    in_flight_ += reqs->size();
  } else {
    // The queue refused them all: fail each without a retry.
    Log(0, "disk tier: %s", st.message().c_str());
    for (const IoRequest& r : *reqs) {
      lanes_[r.user_data].attempts = 2;
      Finish(static_cast<unsigned>(r.user_data), -ECANCELED, nullptr);
    }
  }
  reqs->clear();
  return st.ok();
}

void SpillBatch::Finish(unsigned lane, int64_t result, std::vector<IoRequest>* retries) {
  Op& op = lanes_[lane];
  if (op.kind == IoKind::kWrite) return FinishWrite(lane, result);
  ReadFailure why;
  std::string detail;
  uint8_t* data = op.bounce ? bounce_[lane].data() : static_cast<uint8_t*>(op.dst);
  if (!CheckRead(op, data, result, &why, &detail)) {
    if (retries != nullptr && TakeRetry(op, detail)) {
      retries->push_back(RequestFor(op, lane));
      return;
    }
    FailRead(op, why, detail);
  }
  free_lanes_.push_back(lane);
}

std::string SpillBatch::CheckPage(const Op& op, uint8_t* data, uint32_t i) const {
  // A run is verified page by page.
  const size_t page = op.pages > 1 ? store_->page_size() : op.len;
  uint8_t* bytes = data + size_t{i} * page;
  const std::string of_slot = op.pages > 1 ? " of slot " + std::to_string(op.slot + i) : "";
  if (store_->encrypts()) {
    Status open = store_->OpenPage(op.slot + i, op.place.Next(i), bytes, page);
    return open.ok() ? "" : "page" + of_slot + ": " + open.message();
  }
  const uint64_t sum = PageChecksum(bytes, page);
  const uint64_t expected = op.pages > 1 ? op.checksums[i] : op.checksum;
  if (sum == expected) return "";
  char text[112];
  snprintf(text, sizeof text,
           "XXH3 checksum %016llx%s does not match the %016llx recorded at spill",
           static_cast<unsigned long long>(sum), of_slot.c_str(),
           static_cast<unsigned long long>(expected));
  return text;
}

std::vector<std::string> SpillBatch::CheckPages(const std::vector<Op>& ops) {
  std::vector<std::pair<size_t, uint32_t>> pages;  // (op, page of it)
  for (size_t k = 0; k < ops.size(); ++k) {
    for (uint32_t i = 0; i < ops[k].pages; ++i) pages.emplace_back(k, i);
  }
  std::vector<std::string> why(pages.size());
  store_->workers_->Run(pages.size(), [&](size_t j) {
    const Op& op = ops[pages[j].first];
    why[j] = CheckPage(op, static_cast<uint8_t*>(op.dst), pages[j].second);
  });
  std::vector<std::string> out(ops.size());
  for (size_t j = pages.size(); j-- > 0;) {
    if (!why[j].empty()) out[pages[j].first] = std::move(why[j]);  // ends with the first
  }
  return out;
}

bool SpillBatch::CheckRead(const Op& op, uint8_t* data, int64_t result, ReadFailure* why,
                           std::string* detail, const std::string* checked) {
  Counters& k = *store_->counters_;
  char text[160];
  if (result == op.io_len) {
    std::string bad;
    if (checked != nullptr) {
      bad = *checked;
    } else {
      for (uint32_t i = 0; i < op.pages && bad.empty(); ++i) bad = CheckPage(op, data, i);
    }
    if (bad.empty()) {
      if (op.bounce) memcpy(op.dst, data, op.len);
      Counters::Add(k.restored_pages, op.pages);
      Counters::Add(k.restored_bytes, op.len);
      SpillCompletion c;
      c.tag = op.tag;
      c.kind = IoKind::kRead;
      c.slot = {op.slot, op.checksum};
      done_.push_back(std::move(c));
      return true;
    }
    Counters::Add(k.checksum_mismatches);
    *why = ReadFailure::kCorruption;
    *detail = bad;
    return false;
  } else {
    Counters::Add(k.restore_errors);
    *why = ReadFailure::kIoError;
    if (result < 0) {
      snprintf(text, sizeof text, "%s", strerror(static_cast<int>(-result)));
    } else {
      snprintf(text, sizeof text, "short read: %lld of %u bytes", static_cast<long long>(result),
               op.io_len);
    }
  }
  *detail = text;
  return false;
}

bool SpillBatch::TakeRetry(Op& op, const std::string& detail) {
  if (op.attempts >= 2) return false;
  Log(1, "disk tier: restore of %s: %s; retrying once", Where(op).c_str(), detail.c_str());
  ++op.attempts;
  return true;
}

void SpillBatch::FailRead(const Op& op, ReadFailure why, const std::string& detail) {
  // Never leave bad bytes where the caller might use them.
  memset(op.dst, 0, op.len);
  SpillCompletion c;
  c.tag = op.tag;
  c.kind = IoKind::kRead;
  c.slot = {op.slot, op.checksum};
  c.failure = why;
  bool corrupt = why == ReadFailure::kCorruption;
  c.status = Status::Error(Where(op) + (corrupt ? " is corrupt: " : " cannot be read: ") + detail +
                           ", on the read and on its retry; " +
                           (corrupt ? "kvtier stops rather than hand corrupted KV to the engine"
                                    : "the page has no other copy") +
                           " (check the disk under the spill directory)");
  done_.push_back(std::move(c));
}

void SpillBatch::FinishWrite(unsigned lane, int64_t result) {
  const Op& op = lanes_[lane];
  SpillCompletion c;
  c.tag = op.tag;
  c.kind = IoKind::kWrite;
  if (result == op.io_len) {
    store_->OnWriteDone(op.len);
    c.slot = {op.slot, op.checksum};
    return Complete(lane, std::move(c));
  }
  char detail[96];
  if (result < 0) {
    snprintf(detail, sizeof detail, "%s", strerror(static_cast<int>(-result)));
  } else {
    snprintf(detail, sizeof detail, "short write: %lld of %u bytes", static_cast<long long>(result),
             op.io_len);
  }
  std::string why = "spill write to " + Where(op) + ": " + detail;
  store_->ReleaseSlot(op.slot);
  store_->OnWriteFailed(why);
  c.status = Status::Error(why + "; the page stays in host memory");
  Complete(lane, std::move(c));
}

std::string SpillBatch::Where(const Op& op) const {
  const std::string slots = op.pages > 1 ? "spill slots " + std::to_string(op.slot) + ".." +
                                               std::to_string(op.slot + op.pages - 1)
                                         : "spill slot " + std::to_string(op.slot);
  return slots + " (offset " + std::to_string(store_->SlotOffset(op.slot)) + " of the " +
         store_->file_description() + ", " + std::to_string(op.len) + " bytes)";
}

void SpillBatch::Complete(unsigned lane, SpillCompletion c) {
  done_.push_back(std::move(c));
  free_lanes_.push_back(lane);
}

}  // namespace kvtier
