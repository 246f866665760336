// PageIo, IsAllZero and ScratchPool: see page_io.h.
#include "runtime/storage/page_io.h"

#include <atomic>
#include <cstdlib>

#include "runtime/log.h"

namespace kvtier {

bool IsAllZero(const uint8_t* bytes, size_t len) {
  // Word at a time; pages are page aligned and a multiple of 8 bytes.
  const auto* words = reinterpret_cast<const uint64_t*>(bytes);
  uint64_t any = 0;
  for (size_t i = 0; i < len / sizeof(uint64_t); ++i) {
    any |= words[i];
    if ((i & 511) == 511 && any != 0) return false;  // stop early on data
  }
  return any == 0;
}

void StopOnLostPage(const SpillStore& store, uint32_t region_id, const std::string& tag,
                    uint32_t page, const Status& why) {
  Log(0,
      "disk tier: stopping the process: region %u (%s) page %u cannot be restored from the %s: %s",
      region_id, tag.c_str(), page, store.file_description().c_str(), why.message().c_str());
  abort();
}

void PageIo::Write(const std::vector<Source>& sources, const WrittenFn& written) {
  if (sources.size() == 1) {
    written(0, store_->Write(sources[0].bytes, sources[0].len, sources[0].place));
    return;
  }
  MutexLock lock(&mu_);
  std::vector<bool> reported(sources.size(), false);
  auto report = [&](const std::vector<SpillCompletion>& done) {
    for (const SpillCompletion& c : done) {
      reported[c.tag] = true;
      written(c.tag, c.status.ok() ? Result<SpillSlot>(c.slot) : Result<SpillSlot>(c.status));
    }
  };
  Status broken = EnsureBatchLocked();
  if (broken.ok()) {
    for (size_t j = 0; j < sources.size(); ++j) {
      batch_->AddWrite(sources[j].bytes, sources[j].len, j, sources[j].place);
    }
    while (broken.ok() && batch_->outstanding() > 0) {
      std::vector<SpillCompletion> done;
      broken = batch_->Wait(1, &done);
      report(done);  // what completed, even when the queue broke
    }
    // A broken queue is dropped; the next group sets up a new one.
    if (!broken.ok()) batch_.reset();
  }
  const Status missing = broken.ok() ? Status::Error("the spill write did not complete") : broken;
  for (size_t j = 0; j < sources.size(); ++j) {
    if (!reported[j]) written(j, missing);
  }
}

void PageIo::Read(const std::vector<Target>& targets, const ReadFn& read) {
  if (targets.size() == 1) {
    const Target& t = targets[0];
    read(0, store_->Read(t.slot, t.dst, t.len, t.checksum, nullptr, t.place));
    return;
  }
  MutexLock lock(&mu_);
  std::vector<bool> reported(targets.size(), false);
  Status broken = EnsureBatchLocked();
  if (broken.ok()) {
    for (size_t j = 0; j < targets.size(); ++j) {
      const Target& t = targets[j];
      batch_->AddRead(t.slot, t.dst, t.len, t.checksum, j, t.place);
    }
    while (broken.ok() && batch_->outstanding() > 0) {
      std::vector<SpillCompletion> done;
      broken = batch_->Wait(1, &done);
      for (const SpillCompletion& c : done) {
        reported[c.tag] = true;
        read(c.tag, c.status);
      }
    }
    if (!broken.ok()) batch_.reset();
  }
  const Status missing = broken.ok() ? Status::Error("the restore read did not complete") : broken;
  for (size_t j = 0; j < targets.size(); ++j) {
    if (!reported[j]) read(j, missing);
  }
}

Status PageIo::EnsureBatchLocked() {
  if (batch_ != nullptr) return Status::Ok();
  Result<std::unique_ptr<SpillBatch>> made = store_->NewBatch();
  if (!made.ok()) return made.status();
  batch_ = std::move(made).value();
  return Status::Ok();
}

void PageIo::Reset() {
  MutexLock lock(&mu_);
  batch_.reset();
}

AlignedBuffer ScratchPool::Take(size_t bytes) {
  {
    MutexLock lock(&mu_);
    for (size_t i = 0; i < free_.size(); ++i) {
      if (free_[i].size() < bytes) continue;
      AlignedBuffer b = std::move(free_[i]);
      free_.erase(free_.begin() + static_cast<ptrdiff_t>(i));
      return b;
    }
  }
  Result<AlignedBuffer> made = AlignedBuffer::Allocate(bytes);
  if (!made.ok()) {
    static std::atomic<bool> warned{false};
    WarnOnce(&warned, "%s: %s", owner_, made.status().message().c_str());
    return AlignedBuffer();
  }
  return std::move(made).value();
}

void ScratchPool::Return(AlignedBuffer buffer) {
  if (buffer.data() == nullptr) return;
  MutexLock lock(&mu_);
  if (free_.size() < keep_) free_.push_back(std::move(buffer));
}

}  // namespace kvtier
