// PlainAllocations: see plain_allocations.h.
#include "interpose/plain_allocations.h"

namespace kvtier::interpose {

bool PlainAllocations::Reserve(uint64_t bytes, uint64_t limit) {
  uint64_t cur = bytes_.load(std::memory_order_relaxed);
  do {
    if (bytes > limit || cur > limit - bytes) return false;
  } while (!bytes_.compare_exchange_weak(cur, cur + bytes, std::memory_order_relaxed));
  return true;
}

void PlainAllocations::Unreserve(uint64_t bytes) {
  bytes_.fetch_sub(bytes, std::memory_order_relaxed);
}

void PlainAllocations::Insert(const void* base, size_t bytes) {
  MutexLock lock(&mu_);
  by_base_[reinterpret_cast<uintptr_t>(base)] = bytes;
}

size_t PlainAllocations::Remove(const void* base) {
  MutexLock lock(&mu_);
  auto it = by_base_.find(reinterpret_cast<uintptr_t>(base));
  if (it == by_base_.end()) return 0;
  size_t bytes = it->second;
  by_base_.erase(it);
  bytes_.fetch_sub(bytes, std::memory_order_relaxed);
  return bytes;
}

bool PlainAllocations::Contains(const void* p, size_t n) const {
  uintptr_t addr = reinterpret_cast<uintptr_t>(p);
  MutexLock lock(&mu_);
  auto it = by_base_.upper_bound(addr);  // first base > addr
  if (it == by_base_.begin()) return false;
  --it;
  uintptr_t end = it->first + it->second;
  return addr >= it->first && addr < end && n <= end - addr;
}

size_t PlainAllocations::count() const {
  MutexLock lock(&mu_);
  return by_base_.size();
}

}  // namespace kvtier::interpose
