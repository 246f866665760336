// Region and PageTable: what kvtier knows about each tracked allocation.
//
// A Region is one tiered allocation split into pages of the page size; its
// PageTable is a dense array of compact page records (32 bytes; 1 TiB of
// regions at 2 MiB pages is 512 K records, 16 MiB). No per-page heap objects.
//
// Thread-safety, per field of PageRecord:
//   tier, flags    atomics; written only by the device backend while it holds
//                  its transition lock (moves, faults, dormant hints), read by
//                  anyone (the policy thread also sets kPageWillNeed and
//                  kPagePinned from hints).
//   heat, last_access, last_move, refaults
//                  owned by the policy thread (it applies signals and moves).
//   disk_slot, checksum
//                  written by the backend under its lock when a page is
//                  spilled; valid while tier == kDisk, or while kPageDiskCopy
//                  is set (a page back in memory keeps its copy on SSD).
// Region fields other than pages are immutable after creation.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace kvtier {

using RegionId = uint32_t;

enum class Tier : uint8_t {
  kDevice = 0,     // resident in GPU memory (sim: PTEs present)
  kHost = 1,       // in host DRAM (sim: in the memfd, PTEs zapped)
  kDisk = 2,       // spilled to an SSD file (sim: hole punched in the memfd)
  kUntouched = 3,  // never touched: no backing anywhere yet (reads as zeros)
};
constexpr int kTierCount = 3;  // device, host, disk (untouched holds no bytes)
const char* TierName(Tier t);

enum PageFlag : uint8_t {
  kPagePinned = 1 << 0,             // policy must not demote it (hint PIN)
  kPageInFlight = 1 << 1,           // a move is in progress
  kPageTouchedDuringMove = 1 << 2,  // a fault hit the page while it moved: abort the spill
  kPageWillNeed = 1 << 3,           // hinted WILL_NEED: promote when there is room
  // hinted DORMANT: the engine promised not to touch it until it wakes it
  // (WILL_NEED or kvtier_wait); the disk tier may spill it whatever the GPU does
  kPageDormant = 1 << 4,
  // Back in memory from the disk tier, with its copy there kept (disk_slot,
  // checksum): while its bytes still hash to checksum it leaves again
  // without a write. Set and cleared by the backend under its lock.
  kPageDiskCopy = 1 << 5,
  // Unchanged since its bytes were last copied to SSD or back from there:
  // mapped write-protected since, so that a write would have raised a WP
  // fault and cleared it (sim backends with write protection). With
  // kPageDiskCopy, the page leaves again without a write and without
  // hashing its bytes. Set and cleared by the backend under its lock.
  kPageUnwritten = 1 << 6,
  // A copy of it ahead of its eviction is being written: no second one
  // starts meanwhile (it would set kPageUnwritten for bytes the first one's
  // copy may not hold). Sim backends, under their lock.
  kPageCopying = 1 << 7,
};

struct PageRecord {
  std::atomic<Tier> tier{Tier::kUntouched};
  std::atomic<uint8_t> flags{0};
  uint16_t refaults = 0;
  uint32_t heat = 0;         // decayed access count (policy thread)
  uint32_t last_access = 0;  // policy tick of the last access signal
  uint32_t last_move = 0;    // policy tick of the last migration
  uint32_t disk_slot = 0;
  uint32_t backend = 0;   // the device backend's own, under its lock (memfd: read-ahead marks)
  uint64_t checksum = 0;  // XXH3-64 of the spilled bytes
};
static_assert(sizeof(PageRecord) <= 32, "page records must stay compact");

class PageTable {
 public:
  explicit PageTable(size_t pages) : pages_(new PageRecord[pages]), count_(pages) {}
  size_t size() const { return count_; }
  PageRecord& operator[](size_t i) { return pages_[i]; }
  const PageRecord& operator[](size_t i) const { return pages_[i]; }

 private:
  std::unique_ptr<PageRecord[]> pages_;
  size_t count_;
};

struct Region {
  Region(RegionId id, uintptr_t base, size_t size, size_t page_size, std::string tag)
      : id(id),
        base(base),
        size(size),
        page_size(page_size),
        pages((size + page_size - 1) / page_size),
        tag(std::move(tag)) {}

  const RegionId id;
  const uintptr_t base;
  const size_t size;  // bytes the engine asked for
  const size_t page_size;
  PageTable pages;
  const std::string tag;    // "alloc#12 libchat.so", for people
  void* backend = nullptr;  // the device backend's per-region state
  // Set by a backend whose disk tier may spill a page only while no GPU work
  // can reach it (the CUDA backend): true while its GPU work is sealed off.
  // Null: any host page may be spilled. See MaySpill.
  const std::atomic<bool>* spill_gate = nullptr;
  // Set by a backend that stopped tracking the region's pages (a degraded
  // host block, its view no longer registered): a page's record then no
  // longer says where its bytes are (a never-touched page may hold some).
  std::atomic<bool> untracked{false};

  bool Contains(uintptr_t addr) const { return addr >= base && addr < base + size; }
  uint32_t PageOf(uintptr_t addr) const { return static_cast<uint32_t>((addr - base) / page_size); }
  uintptr_t PageAddr(uint32_t page) const { return base + uint64_t{page} * page_size; }
  // Bytes of page `page` that lie inside the region (the last page may be short).
  size_t PageBytes(uint32_t page) const {
    size_t off = uint64_t{page} * page_size;
    return size - off < page_size ? size - off : page_size;
  }
};

// Whether the backend may spill `rec`, a page of `region`, now: always where
// spills need no gate; else a dormant page, or any page while the gate is
// sealed. Policies pick spills among these.
inline bool MaySpill(const Region& region, const PageRecord& rec) {
  return region.spill_gate == nullptr ||
         (rec.flags.load(std::memory_order_relaxed) & kPageDormant) != 0 ||
         region.spill_gate->load(std::memory_order_acquire);
}

using RegionPtr = std::shared_ptr<Region>;

// One page of a region (policies' candidate lists, batched device calls).
struct PageRef {
  Region* region = nullptr;
  uint32_t page = 0;
};

}  // namespace kvtier
