// The residency books every backend keeps the same way (the memfd device
// behind the simulated GPU and the host backend, and the CUDA backend):
//  - ResidentList: a device's eviction order, an intrusive doubly linked
//    FIFO of the pages resident on it, oldest migration first, with their
//    bytes. UVM evicts the least recently *migrated* block (it cannot see
//    accesses to resident memory), so pages join at the tail when they
//    arrive on the device and never move while resident. Links live in a
//    per-region array allocated with the region, so a transition allocates
//    nothing.
//  - MoveTier: a page changing tier, booked in one step: the list, the
//    device's resident total, the per-tier gauges (AccountTierBytes; disk
//    bytes are the store's, booked as slots are written and freed), and the
//    page record's tier, stored last.
// Thread-safety: none; the backend guards every list, link and record with
// its transition mutex (the resident total is an atomic for readers
// outside it).
#pragma once

#include <atomic>
#include <cstdint>

#include "runtime/counters.h"
#include "runtime/page_table.h"

namespace kvtier {

template <class Owner>
struct ResidentLink {
  ResidentLink* prev = nullptr;
  ResidentLink* next = nullptr;
  Owner* owner = nullptr;  // set once when the region is created
  uint32_t page = 0;       // index of the page this link stands for

  bool linked() const { return next != nullptr; }
};

template <class Owner>
class ResidentList {
 public:
  using Link = ResidentLink<Owner>;

  ResidentList() { head_.prev = head_.next = &head_; }
  ResidentList(const ResidentList&) = delete;
  ResidentList& operator=(const ResidentList&) = delete;

  bool empty() const { return head_.next == &head_; }
  // Bytes of the pages on the list.
  uint64_t bytes() const { return bytes_; }
  // The page resident the longest, or nullptr.
  Link* Oldest() { return empty() ? nullptr : head_.next; }
  // The page that arrived after `link`, or nullptr.
  Link* Newer(Link* link) { return link->next == &head_ ? nullptr : link->next; }

  void PushNewest(Link* link, uint64_t bytes) {
    link->prev = head_.prev;
    link->next = &head_;
    head_.prev->next = link;
    head_.prev = link;
    bytes_ += bytes;
  }
  void Remove(Link* link, uint64_t bytes) {
    link->prev->next = link->next;
    link->next->prev = link->prev;
    link->prev = link->next = nullptr;
    bytes_ -= bytes;
  }

 private:
  Link head_;  // sentinel
  uint64_t bytes_ = 0;
};

// Books the page of `rec` (its link `link`, `bytes` long) moving to tier
// `to` on a device whose list is `list` and whose resident bytes, with
// those of any other device of the backend, are `resident_total`. Returns
// the tier it left; nothing changes when that is `to`.
template <class Owner>
Tier MoveTier(PageRecord& rec, ResidentLink<Owner>& link, uint64_t bytes, Tier to,
              ResidentList<Owner>& list, std::atomic<uint64_t>& resident_total,
              Counters& counters) {
  const Tier from = rec.tier.load(std::memory_order_relaxed);
  if (from == to) return from;
  if (from == Tier::kDevice) {
    list.Remove(&link, bytes);
    resident_total.fetch_sub(bytes, std::memory_order_relaxed);
  }
  if (to == Tier::kDevice) {  // newest at the tail
    list.PushNewest(&link, bytes);
    resident_total.fetch_add(bytes, std::memory_order_relaxed);
  }
  if (from != Tier::kDisk) AccountTierBytes(counters, from, bytes, /*add=*/false);
  if (to != Tier::kDisk) AccountTierBytes(counters, to, bytes, /*add=*/true);
  rec.tier.store(to, std::memory_order_release);
  return from;
}

// Takes the page of a region being destroyed out of the books, as
// MoveTier would to a tier that holds nothing; its record is left as it is.
template <class Owner>
void DropFromBooks(const PageRecord& rec, ResidentLink<Owner>& link, uint64_t bytes,
                   ResidentList<Owner>& list, std::atomic<uint64_t>& resident_total,
                   Counters& counters) {
  const Tier tier = rec.tier.load(std::memory_order_relaxed);
  if (tier == Tier::kDevice) {
    list.Remove(&link, bytes);
    resident_total.fetch_sub(bytes, std::memory_order_relaxed);
  }
  if (tier != Tier::kDisk) AccountTierBytes(counters, tier, bytes, /*add=*/false);
}

}  // namespace kvtier
