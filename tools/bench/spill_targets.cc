// The raw and store targets of `kvtier-bench spill` (see spill_bench.h).
// Thread-safety: single-threaded tool.
#include <string.h>

#include <vector>

#include "runtime/storage/spill_batch.h"
#include "runtime/storage/spill_store.h"
#include "tools/bench/spill_bench.h"

namespace kvtier::bench::spill {
namespace {

class RawTarget final : public Target {
 public:
  static Result<std::unique_ptr<RawTarget>> Open(const Args& a, Env* env, const uint8_t* src,
                                                 bool from_source) {
    std::unique_ptr<RawTarget> t(new RawTarget(a, env));
    if (from_source) t->source_ = src;
    bool direct = true;
    Result<int> fd = env->OpenTmpFile(a.dir, true);
    if (!fd.ok()) {
      direct = false;
      fd = env->OpenTmpFile(a.dir, false);
      if (!fd.ok()) return fd.status();
    }
    t->fd_ = fd.value();
    if (Status st = env->Allocate(t->fd_, 0, a.size); !st.ok()) return st;
    if (Result<std::unique_ptr<IoQueue>> u = env->NewUringQueue(a.qd); u.ok()) {
      t->q_ = std::move(u).value();
    } else {
      t->q_ = env->NewSyncQueue(a.qd);
    }
    std::vector<struct iovec> iovs;
    for (unsigned i = 0; i < a.qd; ++i) {
      Result<AlignedBuffer> b = AlignedBuffer::Allocate(a.page);
      if (!b.ok()) return b.status();
      memcpy(b.value().data(), src + i * a.page, a.page);
      iovs.push_back({b.value().data(), b.value().size()});
      t->bufs_.push_back(std::move(b).value());
    }
    t->fixed_ = t->q_->RegisterBuffers(iovs.data(), a.qd).ok();
    t->how_ = std::string(t->q_->name()) + (direct ? "+direct" : "") +
              (t->fixed_ ? ", fixed buffers" : "");
    return t;
  }
  ~RawTarget() override { env_->Close(fd_); }
  std::string how() const override { return how_; }
  Result<double> WriteAll() override { return Pass(IoKind::kWrite, 0, a_.size / a_.page); }
  Result<double> ReadAll() override { return Pass(IoKind::kRead, 0, a_.size / a_.page); }
  Result<double> ReadOne(size_t page) override { return Pass(IoKind::kRead, page, 1); }

 private:
  RawTarget(const Args& a, Env* env) : a_(a), env_(env) {}

  // `count` pages from `first` on, up to the queue depth in flight.
  Result<double> Pass(IoKind kind, size_t first, size_t count) {
    size_t next = first, end = first + count, done = 0;
    auto make = [&](unsigned lane) {
      IoRequest r;
      r.kind = kind;
      r.fd = fd_;
      bool from_source = source_ != nullptr && kind == IoKind::kWrite;
      r.buf = from_source ? const_cast<uint8_t*>(source_ + next * a_.page) : bufs_[lane].data();
      r.len = static_cast<uint32_t>(a_.page);
      r.offset = uint64_t{next++} * a_.page;
      r.buf_index = fixed_ && !from_source ? static_cast<int>(lane) : -1;
      r.user_data = lane;
      return r;
    };
    std::vector<IoRequest> reqs;
    std::vector<IoCompletion> comps;
    double t0 = Now();
    for (unsigned lane = 0; lane < bufs_.size() && next < end; ++lane) reqs.push_back(make(lane));
    while (done < count) {
      Status st = reqs.empty() ? Status::Ok() : q_->Submit(reqs.data(), reqs.size());
      reqs.clear();
      comps.clear();
      if (st.ok()) st = q_->Wait(1, &comps);
      if (!st.ok()) return st;
      for (const IoCompletion& c : comps) {
        if (c.result != static_cast<int64_t>(a_.page)) {
          return Status::Errorf(
              "raw %s: %s", kind == IoKind::kWrite ? "write" : "read",
              c.result < 0 ? strerror(static_cast<int>(-c.result)) : "short transfer");
        }
        ++done;
        if (next < end) reqs.push_back(make(static_cast<unsigned>(c.user_data)));
      }
    }
    return Now() - t0;
  }

  const Args& a_;
  Env* const env_;
  int fd_ = -1;
  std::unique_ptr<IoQueue> q_;
  std::vector<AlignedBuffer> bufs_;
  bool fixed_ = false;
  const uint8_t* source_ = nullptr;
  std::string how_;
};

class StoreTarget final : public Target {
 public:
  static Result<std::unique_ptr<StoreTarget>> Open(const Args& a, Env* env, bool clear,
                                                   const uint8_t* src, uint8_t* dst) {
    std::unique_ptr<StoreTarget> t(new StoreTarget(a, src, dst));
    SpillStoreConfig cfg;
    cfg.dir = a.dir;
    cfg.budget_bytes = a.size;
    cfg.page_size = a.page;
    cfg.queue_depth = a.qd;
    cfg.cipher = StoreCipher(a);
    cfg.encrypt = !clear;
    Result<std::unique_ptr<SpillStore>> s = SpillStore::Create(cfg, env, nullptr);
    if (!s.ok()) return s.status();
    t->store_ = std::move(s).value();
    Result<std::unique_ptr<SpillBatch>> b = t->store_->NewBatch();
    if (!b.ok()) return b.status();
    t->batch_ = std::move(b).value();
    Result<AlignedBuffer> page = AlignedBuffer::Allocate(a.page);
    if (!page.ok()) return page.status();
    t->page_buf_ = std::move(page).value();
    t->slots_.resize(a.size / a.page);
    return t;
  }
  ~StoreTarget() override { batch_.reset(); }  // before the store
  std::string how() const override { return store_->io_mode(); }

  Result<double> WriteAll() override {
    if (written_) {
      // A refill: the pages' slots go back first, last one first, so the
      // free list hands them out again in file order (a store reusing the
      // slots of restored pages, as it does once it has filled).
      for (size_t i = slots_.size(); i-- > 0;) store_->Free(slots_[i].index);
    }
    for (size_t i = 0; i < slots_.size(); ++i) batch_->AddWrite(src_ + i * a_.page, a_.page, i);
    written_ = true;
    return Run(true);
  }
  Result<double> ReadAll() override {
    memset(dst_, 0, slots_.size() * a_.page);
    for (size_t i = 0; i < slots_.size(); ++i) {
      batch_->AddRead(slots_[i].index, dst_ + i * a_.page, a_.page, slots_[i].checksum, i);
    }
    Result<double> t = Run(false);
    if (t.ok() && memcmp(src_, dst_, slots_.size() * a_.page) != 0) {
      return Status::Error("restored pages differ from the spilled ones");
    }
    return t;
  }
  Result<double> ReadOne(size_t page) override {
    double t0 = Now();
    Status st = store_->Read(slots_[page].index, page_buf_.data(), a_.page, slots_[page].checksum);
    double t1 = Now();
    if (!st.ok()) return st;
    return t1 - t0;
  }

 private:
  StoreTarget(const Args& a, const uint8_t* src, uint8_t* dst) : a_(a), src_(src), dst_(dst) {}

  Result<double> Run(bool writes) {
    std::vector<SpillCompletion> done;
    double t0 = Now();
    Status st = batch_->WaitAll(&done);
    double t1 = Now();
    if (!st.ok()) return st;
    for (const SpillCompletion& d : done) {
      if (!d.status.ok()) return d.status;
      if (writes) slots_[d.tag] = d.slot;
    }
    return t1 - t0;
  }

  const Args& a_;
  const uint8_t* const src_;
  uint8_t* const dst_;
  std::unique_ptr<SpillStore> store_;
  std::unique_ptr<SpillBatch> batch_;
  AlignedBuffer page_buf_;
  std::vector<SpillSlot> slots_;
  bool written_ = false;  // slots_ holds every page's slot
};

}  // namespace

Result<std::unique_ptr<Target>> OpenRawTarget(const Args& a, Env* env, const uint8_t* src,
                                              bool from_source) {
  Result<std::unique_ptr<RawTarget>> t = RawTarget::Open(a, env, src, from_source);
  if (!t.ok()) return t.status();
  return std::unique_ptr<Target>(std::move(t).value());
}

Result<std::unique_ptr<Target>> OpenStoreTarget(const Args& a, Env* env, bool clear,
                                                const uint8_t* src, uint8_t* dst) {
  Result<std::unique_ptr<StoreTarget>> t = StoreTarget::Open(a, env, clear, src, dst);
  if (!t.ok()) return t.status();
  return std::unique_ptr<Target>(std::move(t).value());
}

}  // namespace kvtier::bench::spill
