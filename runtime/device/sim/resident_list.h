// ResidentList: the simulated driver's eviction order, an intrusive doubly
// linked FIFO of the pages resident on the device, oldest migration first.
//
// UVM evicts the least recently *migrated* block (it cannot see accesses to
// resident memory), so pages join at the tail when they arrive on the device
// and never move while resident. Links live in a per-region array allocated
// with the region, so a transition allocates nothing.
// Thread-safety: none; SimDevice guards every list and link with its
// transition mutex.
#pragma once

#include <cstdint>

namespace kvtier {

struct SimRegion;

struct ResidentLink {
  ResidentLink* prev = nullptr;
  ResidentLink* next = nullptr;
  SimRegion* owner = nullptr;  // set once when the region is created
  uint32_t page = 0;           // index of the page this link stands for

  bool linked() const { return next != nullptr; }
};

class ResidentList {
 public:
  ResidentList() { head_.prev = head_.next = &head_; }
  ResidentList(const ResidentList&) = delete;
  ResidentList& operator=(const ResidentList&) = delete;

  bool empty() const { return head_.next == &head_; }
  // The page resident the longest, or nullptr.
  ResidentLink* Oldest() { return empty() ? nullptr : head_.next; }
  // The page that arrived after `link`, or nullptr.
  ResidentLink* Newer(ResidentLink* link) { return link->next == &head_ ? nullptr : link->next; }

  void PushNewest(ResidentLink* link) {
    link->prev = head_.prev;
    link->next = &head_;
    head_.prev->next = link;
    head_.prev = link;
  }
  void Remove(ResidentLink* link) {
    link->prev->next = link->next;
    link->next->prev = link->prev;
    link->prev = link->next = nullptr;
  }

 private:
  ResidentLink head_;  // sentinel
};

}  // namespace kvtier
