// RegionTable: ordered map of regions by base address (see region_table.h).
#include "runtime/region_table.h"

namespace kvtier {

void RegionTable::Insert(RegionPtr region) {
  WriterMutexLock lock(&mu_);
  uintptr_t base = region->base;
  by_base_[base] = std::move(region);
}

RegionPtr RegionTable::Remove(uintptr_t base) {
  WriterMutexLock lock(&mu_);
  auto it = by_base_.find(base);
  if (it == by_base_.end()) return nullptr;
  RegionPtr r = std::move(it->second);
  by_base_.erase(it);
  return r;
}

RegionPtr RegionTable::Find(uintptr_t addr) const {
  ReaderMutexLock lock(&mu_);
  auto it = by_base_.upper_bound(addr);  // first base > addr
  if (it == by_base_.begin()) return nullptr;
  --it;
  return it->second->Contains(addr) ? it->second : nullptr;
}

RegionPtr RegionTable::FindById(RegionId id) const {
  ReaderMutexLock lock(&mu_);
  for (const auto& [base, r] : by_base_) {
    if (r->id == id) return r;
  }
  return nullptr;
}

std::vector<RegionPtr> RegionTable::Snapshot() const {
  ReaderMutexLock lock(&mu_);
  std::vector<RegionPtr> out;
  out.reserve(by_base_.size());
  for (const auto& [base, r] : by_base_) out.push_back(r);
  return out;
}

size_t RegionTable::size() const {
  ReaderMutexLock lock(&mu_);
  return by_base_.size();
}

}  // namespace kvtier
