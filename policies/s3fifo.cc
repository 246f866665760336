// S3FifoPolicy: small, main and ghost FIFOs (see s3fifo.h).
#include "policies/s3fifo.h"

#include <algorithm>

namespace kvtier {

void S3FifoPolicy::Leave(State& st) {
  switch (st.where) {
    case Where::kSmall:
      --small_count_;
      break;
    case Where::kMain:
      --main_count_;
      break;
    case Where::kGhost:
      --ghost_count_;
      break;
    case Where::kNone:
      break;
  }
  st.where = Where::kNone;
  ++st.stamp;
}

void S3FifoPolicy::Enqueue(std::deque<Entry>* q, State& st, Where where, uint64_t key) {
  Leave(st);
  st.where = where;
  switch (where) {
    case Where::kSmall:
      ++small_count_;
      break;
    case Where::kMain:
      ++main_count_;
      break;
    case Where::kGhost:
      ++ghost_count_;
      break;
    case Where::kNone:
      break;
  }
  q->push_back({key, st.stamp});
}

S3FifoPolicy::State* S3FifoPolicy::Front(std::deque<Entry>* q, Where where, Entry* entry) {
  while (!q->empty()) {
    Entry e = q->front();
    State* st = state_.Find(KeyRegion(e.key), KeyPage(e.key));
    if (st && st->stamp == e.stamp && st->where == where) {
      *entry = e;
      return st;
    }
    q->pop_front();
  }
  return nullptr;
}

void S3FifoPolicy::TrimGhost(size_t capacity) {
  Entry e;
  while (ghost_count_ > capacity) {
    State* st = Front(&ghost_, Where::kGhost, &e);
    if (!st) break;
    ghost_.pop_front();
    Leave(*st);
  }
}

void S3FifoPolicy::OnResident(const Region& region, uint32_t page, Tier from, uint32_t now) {
  State& st = state_.At(region, page);
  const uint64_t key = PageKey(region.id, page);
  switch (st.where) {
    case Where::kGhost:
      Enqueue(&main_, st, Where::kMain, key);
      st.freq = 0;
      break;
    case Where::kSmall:
    case Where::kMain:
      // Still queued but faulted: it left behind this policy's back (driver
      // eviction) and is wanted again, which is a hit.
      st.freq = static_cast<uint8_t>(std::min(st.freq + 1, 3));
      break;
    case Where::kNone:
      Enqueue(&small_, st, Where::kSmall, key);
      st.freq = 0;
      break;
  }
}

void S3FifoPolicy::OnAccess(const Region& region, uint32_t page, uint32_t now) {
  State& st = state_.At(region, page);
  if (st.where == Where::kSmall || st.where == Where::kMain) {
    st.freq = static_cast<uint8_t>(std::min(st.freq + 1, 3));
  }
}

void S3FifoPolicy::PickVictims(const PolicyView& view, uint64_t bytes, bool protect,
                               std::vector<PageRef>* out) {
  Region* any = view.regions->empty() ? nullptr : view.regions->front().get();
  if (!any) return;
  RegionIndex index;
  index.Build(*view.regions);
  const size_t device_pages = std::max<uint64_t>(1, view.device().budget / any->page_size);
  const size_t small_target = std::max<size_t>(1, static_cast<size_t>(device_pages * kSmallShare));
  uint64_t covered = 0;
  // Each queued page is looked at a bounded number of times per call.
  size_t steps = 4 * (small_count_ + main_count_) + 16;
  Entry e;
  while (covered < bytes && steps-- > 0) {
    const bool from_small = small_count_ > 0 && (small_count_ >= small_target || main_count_ == 0);
    std::deque<Entry>* q = from_small ? &small_ : &main_;
    State* st = Front(q, from_small ? Where::kSmall : Where::kMain, &e);
    if (!st) {
      if (from_small)
        small_count_ = 0;
      else
        main_count_ = 0;  // only stale entries were left
      if (small_count_ == 0 && main_count_ == 0) break;
      continue;
    }
    q->pop_front();
    Region* r = index.Find(KeyRegion(e.key));
    const uint32_t page = KeyPage(e.key);
    if (!r || page >= r->pages.size() ||
        r->pages[page].tier.load(std::memory_order_relaxed) != Tier::kDevice) {
      Leave(*st);  // no longer on the device: nothing to evict
      continue;
    }
    const bool eligible = Eligible(*r, page, view.now, protect);
    if (from_small) {
      if (st->freq > 1 || !eligible) {
        Enqueue(&main_, *st, Where::kMain, e.key);
        st->freq = 0;
        continue;
      }
      Enqueue(&ghost_, *st, Where::kGhost, e.key);
    } else {
      if (st->freq > 0 || !eligible) {
        if (st->freq > 0) --st->freq;
        Enqueue(&main_, *st, Where::kMain, e.key);
        continue;
      }
      Leave(*st);
    }
    out->push_back({r, page});
    covered += r->page_size;
  }
  TrimGhost(device_pages - std::min(device_pages, small_target));
}

}  // namespace kvtier
