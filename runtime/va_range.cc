// VaRange: see va_range.h.
#include "runtime/va_range.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <iterator>

namespace kvtier {

constinit VaRange VaRange::process_;

VaRange::~VaRange() {
  if (this == &process_) return;  // a late free() may still test it
  MutexLock lock(&mu_);
  if (size() != 0) munmap(reinterpret_cast<void*>(lo()), size());
  delete free_;
  free_ = nullptr;
  delete plain_;
  plain_ = nullptr;
}

Status VaRange::Reserve(size_t bytes) {
  MutexLock lock(&mu_);
  if (size() != 0) return Status::Ok();
  if (bytes == 0) return Status::Error("reserving 0 bytes of address space");
  void* area = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (area == MAP_FAILED) {
    return Status::Errorf("reserving %zu bytes of address space for tiered blocks failed: %s",
                          bytes, strerror(errno));
  }
  const auto lo = reinterpret_cast<uintptr_t>(area);
  free_ = new std::map<uintptr_t, size_t>();
  free_->emplace(lo, bytes);
  __atomic_store_n(&lo_, lo, __ATOMIC_RELAXED);
  __atomic_store_n(&len_, bytes, __ATOMIC_RELEASE);
  return Status::Ok();
}

Result<uintptr_t> VaRange::Take(size_t bytes, size_t align) {
  MutexLock lock(&mu_);
  if (bytes == 0 || align == 0 || (align & (align - 1)) != 0) {
    return Status::Errorf("address range: bad request of %zu bytes aligned to %zu", bytes, align);
  }
  if (free_ == nullptr) return Status::Error("address range for tiered blocks: not reserved");
  for (auto it = free_->begin(); it != free_->end(); ++it) {
    const uintptr_t start = it->first;
    const size_t len = it->second;
    const uintptr_t aligned = (start + align - 1) & ~(uintptr_t{align} - 1);
    if (aligned - start > len || len - (aligned - start) < bytes) continue;
    free_->erase(it);
    if (aligned > start) free_->emplace(start, aligned - start);
    const uintptr_t end = aligned + bytes;
    if (start + len > end) free_->emplace(end, start + len - end);
    taken_ += bytes;
    return aligned;
  }
  return Status::Errorf(
      "the %zu-byte address range for tiered blocks has no room for %zu more bytes (%zu taken)",
      size(), bytes, taken_);
}

void VaRange::Give(uintptr_t start, size_t bytes) {
  if (bytes == 0) return;
  // Back to a reservation before the span can be handed out again.
  (void)mmap(reinterpret_cast<void*>(start), bytes, PROT_NONE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  MutexLock lock(&mu_);
  if (free_ == nullptr) return;
  taken_ -= bytes;
  uintptr_t lo = start;
  size_t len = bytes;
  auto next = free_->lower_bound(start);
  if (next != free_->begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == lo) {
      lo = prev->first;
      len += prev->second;
      free_->erase(prev);
    }
  }
  if (next != free_->end() && next->first == start + bytes) {
    len += next->second;
    free_->erase(next);
  }
  free_->emplace(lo, len);
}

void VaRange::LockForFork() { mu_.Lock(); }

void VaRange::AdoptPlainForkLocked(uintptr_t start, size_t bytes) {
  if (plain_ == nullptr) plain_ = new std::map<uintptr_t, size_t>();
  (*plain_)[start] = bytes;
}

void VaRange::UnlockAfterFork() { mu_.Unlock(); }

size_t VaRange::PlainBytes(const void* p) const {
  MutexLock lock(&mu_);
  if (plain_ == nullptr) return 0;
  auto it = plain_->find(reinterpret_cast<uintptr_t>(p));
  return it == plain_->end() ? 0 : it->second;
}

bool VaRange::FreePlain(const void* p) {
  size_t bytes = 0;
  {
    MutexLock lock(&mu_);
    if (plain_ == nullptr) return false;
    auto it = plain_->find(reinterpret_cast<uintptr_t>(p));
    if (it == plain_->end()) return false;
    bytes = it->second;
    plain_->erase(it);
  }
  Give(reinterpret_cast<uintptr_t>(p), bytes);
  return true;
}

size_t VaRange::taken_bytes() const {
  MutexLock lock(&mu_);
  return taken_;
}

}  // namespace kvtier
