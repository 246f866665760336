// RegionIndex, PrefetchQueue and Prefetchers (see prefetch.h).
#include "policies/prefetch.h"

#include <algorithm>

namespace kvtier {

void RegionIndex::Build(const std::vector<RegionPtr>& regions) {
  by_id_.clear();
  by_size_.clear();
  for (const RegionPtr& r : regions) {
    by_id_[r->id] = r.get();
    by_size_[r->size].push_back(r.get());
  }
  for (auto& [size, list] : by_size_) {
    std::sort(list.begin(), list.end(), [](Region* a, Region* b) { return a->id < b->id; });
  }
}

Region* RegionIndex::Find(RegionId id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : it->second;
}

const std::vector<Region*>& RegionIndex::Siblings(size_t size) const {
  auto it = by_size_.find(size);
  return it == by_size_.end() ? none_ : it->second;
}

bool Promotable(const PageRecord& rec, bool populate) {
  Tier t = rec.tier.load(std::memory_order_relaxed);
  if (t != Tier::kHost && t != Tier::kDisk && !(populate && t == Tier::kUntouched)) return false;
  return !(rec.flags.load(std::memory_order_relaxed) & kPageInFlight);
}

void PrefetchQueue::Add(RegionId region, uint32_t page, uint32_t now, bool hinted, bool populate) {
  uint64_t key = PageKey(region, page);
  if (!queued_.insert(key).second) return;
  (hinted ? hinted_ : speculative_).push_back({key, now, populate});
}

bool PrefetchQueue::Valid(const RegionIndex& index, const Entry& e, PageRef* ref) const {
  Region* r = index.Find(KeyRegion(e.key));
  uint32_t page = KeyPage(e.key);
  if (!r || page >= r->pages.size() || !Promotable(r->pages[page], e.populate)) return false;
  *ref = {r, page};
  return true;
}

void Prefetchers::OnFault(const Region& region, uint32_t page, Tier from) {
  if (!cross_layer_ && neighbour_pages_ == 0) return;
  pending_.push_back({region.id, region.size, page, from == Tier::kUntouched});
}

void Prefetchers::Expand(const RegionIndex& index, uint32_t now, PrefetchQueue* queue) {
  if (pending_.empty()) return;
  // Forget old expansions now and then (bounded memory).
  if (recent_.size() > (1u << 16)) {
    std::erase_if(recent_, [&](const auto& kv) { return now - kv.second > kSpeculativeTtlTicks; });
  }
  // Keep the triggers that are new for their (group, page).
  std::vector<Trigger> fresh;
  for (const Trigger& t : pending_) {
    GroupPage key{cross_layer_ ? t.size : t.region, t.page};
    auto [it, inserted] = recent_.try_emplace(key, now);
    if (!inserted && now - it->second <= kSpeculativeTtlTicks) continue;
    it->second = now;
    fresh.push_back(t);
  }
  pending_.clear();
  if (fresh.empty()) return;

  if (!cross_layer_) {
    for (const Trigger& t : fresh) {
      Region* r = index.Find(t.region);
      if (!r) continue;
      for (uint32_t d = 1; d <= neighbour_pages_ && t.page + d < r->pages.size(); ++d) {
        queue->Add(r->id, t.page + d, now, false, t.populate);
      }
    }
    return;
  }
  // Layer-major: every sibling in allocation order gets the predicted pages
  // of all fresh triggers of its group.
  std::stable_sort(fresh.begin(), fresh.end(),
                   [](const Trigger& a, const Trigger& b) { return a.size < b.size; });
  for (size_t i = 0; i < fresh.size();) {
    size_t j = i;
    while (j < fresh.size() && fresh[j].size == fresh[i].size) ++j;
    for (Region* r : index.Siblings(fresh[i].size)) {
      for (size_t k = i; k < j; ++k) {
        const Trigger& t = fresh[k];
        for (uint32_t d = 0; d <= neighbour_pages_ && t.page + d < r->pages.size(); ++d) {
          if (d == 0 && r->id == t.region) continue;  // the faulting page itself
          queue->Add(r->id, t.page + d, now, false, t.populate);
        }
      }
    }
    i = j;
  }
}

}  // namespace kvtier
