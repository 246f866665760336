// MemfdDevice's fault threads: they read userfaultfd messages (the simulated
// GPU's page faults) and resolve them through the transition code in
// memfd_device.cc. A handler never touches registered memory: it only issues
// ioctls (the kernel copies), so it cannot fault on itself.
#include <linux/userfaultfd.h>
#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "runtime/device/memfd/memfd_device.h"
#include "runtime/internal_thread.h"
#include "runtime/log.h"

namespace kvtier {
namespace {

constexpr size_t kBatch = 16;  // messages one fault thread reads per read(2)
// How long the drain waits after a pass that wrote nothing (the store backs
// off after errors, or is full) before it tries again unasked.
constexpr std::chrono::milliseconds kDrainBackoff{100};

}  // namespace

Result<int> MemfdDevice::MakeFaultWaitSet() {
  // Each thread waits on its own epoll set, the userfaultfd in it
  // exclusive: a fault wakes one idle thread, not every one (with poll(2)
  // all of them woke for each message and all but one went back to sleep:
  // on two cores, the losers ran before the winner's read and install).
  const int ep = epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0) return Status::Errorf("epoll_create1: %s", strerror(errno));
  epoll_event on_fault{};
  on_fault.events = EPOLLIN | EPOLLEXCLUSIVE;
  on_fault.data.fd = uffd_.fd();
  epoll_event on_stop{};
  on_stop.events = EPOLLIN;
  on_stop.data.fd = stop_fd_;
  if (epoll_ctl(ep, EPOLL_CTL_ADD, uffd_.fd(), &on_fault) != 0 ||
      epoll_ctl(ep, EPOLL_CTL_ADD, stop_fd_, &on_stop) != 0) {
    const int err = errno;
    close(ep);
    return Status::Errorf("epoll_ctl: %s", strerror(err));
  }
  return ep;
}

Status MemfdDevice::StartThreads(int count, const StartStepCheck& check) {
  // The threads start with every asynchronous signal blocked.
  sigset_t old;
  BlockAsyncSignals(&old);
  Status status;
  int ep = -1;
  try {
    for (int i = 0; i < count && status.ok(); ++i) {
      // Asked before the last thread: a failure then leaves the others running.
      if (i == count - 1) status = CheckStartStep(check, "fault threads");
      if (!status.ok()) break;
      // A thread without its set could not wait: Create fails instead.
      const Status step = i == 0 ? CheckStartStep(check, "fault epoll sets") : Status::Ok();
      Result<int> set = step.ok() ? MakeFaultWaitSet() : Result<int>(step);
      if (!set.ok()) {
        status = set.status().Annotate("fault thread " + std::to_string(i + 1) + " of " +
                                       std::to_string(count) + " has nothing to wait on");
        break;
      }
      ep = set.value();
      threads_.push_back(std::make_unique<std::thread>([this, ep] { FaultLoop(ep); }));
      ep = -1;  // the thread's now
    }
  } catch (const std::system_error& e) {
    if (ep >= 0) close(ep);
    status = Status::Errorf("starting fault thread %zu of %d failed: %s", threads_.size() + 1,
                            count, e.what());
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return status;
}

void MemfdDevice::StopThreads() {
  if (restorer_) {
    {
      MutexLock lock(&mu_);
      restore_stop_ = true;
      restore_work_.SignalAll();
      WakeRestorerLocked();
    }
    restorer_->join();
  }
  const uint64_t one = 1;
  if (write(stop_fd_, &one, sizeof one) != sizeof one) {
    Log(0, "%s: stopping fault threads failed: %s", who(), strerror(errno));
  }
  for (auto& t : threads_) t->join();
  threads_.clear();
  // Only now: a fault thread handling a last message reads restorer_.
  restorer_.reset();
  // Last: the fault threads' and the pipeline's last evictions may wait for it.
  if (drainer_) {
    {
      MutexLock lock(&mu_);
      drain_stop_ = true;
      drain_work_.SignalAll();
    }
    drainer_->join();
    drainer_.reset();
  }
}

void MemfdDevice::FaultLoop(int ep) {
  MarkKvtierThread();
  pthread_setname_np(pthread_self(), "kvtier-fault");
  uffd_msg msgs[kBatch];
  // With several threads each takes one fault at a time: a thread that took
  // a batch would resolve it serially (a restore waits on the disk) while
  // the others idle.
  const size_t batch = fault_threads_ > 1 ? 1 : kBatch;
  for (;;) {
    epoll_event ready[2];
    const int n = epoll_wait(ep, ready, 2, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      Log(0, "%s: waiting on userfaultfd failed: %s", who(), strerror(errno));
      break;
    }
    bool stop = false, error = false;
    for (int i = 0; i < n; ++i) {
      if (ready[i].data.fd == stop_fd_) stop = true;
      if (ready[i].data.fd == uffd_.fd() && (ready[i].events & (EPOLLERR | EPOLLHUP))) error = true;
    }
    if (stop) break;
    if (error) {
      Log(0, "%s: userfaultfd reported an error; faults stop", who());
      break;
    }
    // A message may have gone to another thread meanwhile: then EAGAIN.
    const ssize_t got = read(uffd_.fd(), msgs, batch * sizeof msgs[0]);
    if (got < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      Log(0, "%s: reading userfaultfd failed: %s", who(), strerror(errno));
      break;
    }
    const Clock::time_point read_at = Clock::now();
    for (size_t i = 0; i < static_cast<size_t>(got) / sizeof(uffd_msg); ++i) {
      if (msgs[i].event == UFFD_EVENT_PAGEFAULT) HandleFault(msgs[i], read_at);
    }
  }
  close(ep);
}

uint64_t MemfdDevice::FaultReserve() const {
  const uint64_t page = max_page_size_.load(std::memory_order_relaxed);
  const uint64_t quarter = host_limit() / 4;
  return quarter < page
             ? 0
             : std::min(quarter, uint64_t{2} * static_cast<uint64_t>(fault_threads_) * page);
}

uint64_t MemfdDevice::DrainTarget() const {
  const uint64_t limit = host_limit();
  const uint64_t keep =
      std::max<uint64_t>(FaultReserve(), max_page_size_.load(std::memory_order_relaxed));
  return limit > keep ? limit - keep : 0;
}

bool MemfdDevice::StagingOverTargetLocked() const {
  return host_limit() != 0 && staged_bytes_.load(std::memory_order_relaxed) > DrainTarget();
}

Status MemfdDevice::StartDrainer(const StartStepCheck& check) {
  if (store_ == nullptr || host_limit() == 0) return Status::Ok();
  if (Status s = CheckStartStep(check, "staging drain thread"); !s.ok()) return s;
  Status s = StartQuietThread(
      "staging drain thread", [this] { DrainLoop(); }, &drainer_);
  has_drainer_ = s.ok();
  return s;
}

Status MemfdDevice::StartQuietThread(const char* what, std::function<void()> body,
                                     std::unique_ptr<std::thread>* thread) {
  sigset_t old;  // as the fault threads: no asynchronous signal runs on it
  BlockAsyncSignals(&old);
  Status status;
  try {
    *thread = std::make_unique<std::thread>(std::move(body));
  } catch (const std::system_error& e) {
    status = Status::Errorf("starting the %s failed: %s", what, e.what());
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return status;
}

void MemfdDevice::DrainLoop() {
  MarkKvtierThread();
  pthread_setname_np(pthread_self(), "kvtier-drain");
  // Pages written in one pass: the writes go out together, and the first
  // ones leave the staging while the others are still on their way.
  constexpr size_t kMostPages = 16;
  MutexLock lock(&mu_);
  for (;;) {
    // A disk tier that takes no writes (full, failing) is not pressed:
    // the next page staged looks again.
    while (!drain_stop_ && !(StagingOverTargetLocked() && store_->writable())) {
      drain_work_.Wait(mu_);
    }
    if (drain_stop_) return;
    const uint64_t used = staged_bytes_.load(std::memory_order_relaxed);
    const uint64_t target = DrainTarget();
    std::vector<RegionPtr> held;  // alive while their pages are written
    std::vector<PageRef> pages;
    uint64_t picked = 0;
    for (ResidentLink<MemfdRegion>* l = staged_.Oldest();
         l != nullptr && used > target + picked && pages.size() < kMostPages;
         l = staged_.Newer(l)) {
      const MemfdRegion& r = *l->owner;
      if (r.releasing ||
          (r.region->pages[l->page].flags.load(std::memory_order_relaxed) & kPageInFlight)) {
        continue;  // being written (or punched) already, or going away
      }
      held.push_back(r.region);
      pages.push_back({r.region.get(), l->page});
      picked += r.region->page_size;
    }
    if (pages.empty()) {
      // All of them are on their way out already.
      drain_work_.Wait(mu_);
      continue;
    }
    lock.Unlock();
    std::vector<Status> results(pages.size());
    SpillPages(pages, results);
    lock.Lock();
    size_t stuck = 0;
    for (size_t i = 0; i < pages.size(); ++i) {
      if (results[i].ok()) continue;
      // Still staged (a write that failed, a disk that is full): to the
      // newest end, so that the pages behind it drain meanwhile. (A page
      // whose region went away or was untiered is on no list any more.)
      auto* r = static_cast<MemfdRegion*>(pages[i].region->backend);
      if (r == nullptr || !r->links[pages[i].page].linked()) continue;
      ++stuck;
      Unstage(*r, pages[i].page);
      Stage(*r, pages[i].page);
    }
    if (stuck == pages.size()) {
      // Nothing went out: the disk refuses now. Not again at once.
      drain_work_.WaitUntil(mu_, Clock::now() + kDrainBackoff);
    }
  }
}

void MemfdDevice::WaitForStagingRoom(uint64_t bytes, bool engine_waits) {
  // Room for `bytes` more (at most the whole staging): each page coming in
  // may evict one there.
  // The limit may change meanwhile (SetBudget): looked at anew each time.
  // Staged pages only: a degraded region's pages stay in memory untiered.
  auto over = [&] {
    const uint64_t limit = host_limit();
    return staged_bytes_.load(std::memory_order_relaxed) + std::min(bytes, limit) > limit;
  };
  if (!over() || store_ == nullptr || !store_->writable()) return;
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline = start + staging_wait_;
  MutexLock lock(&mu_);
  drain_work_.Signal();  // it is normally at work already
  // A disk tier that stops taking writes (full, failing) ends the wait: the
  // pages then stay in memory, over the limit, rather than stall the engine.
  while (over() && store_->writable()) {
    if (!staging_room_.WaitUntil(mu_, deadline)) break;
  }
  if (!engine_waits) return;
  Counters::Add(counters_.staging_waits);
  Counters::Add(
      counters_.staging_wait_ns,
      static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count()));
}

void MemfdDevice::HandleWriteFault(uintptr_t addr) {
  const size_t base_page = BasePageSize();
  MutexLock lock(&mu_);
  MemfdRegion* r = FindByAddressLocked(addr);
  if (r == nullptr || r->degraded || r->releasing) {
    uffd_.Wake(addr & ~(uintptr_t{base_page} - 1), base_page);
    return;
  }
  Region& reg = *r->region;
  const uint32_t page = reg.PageOf(addr);
  // Under the lock: a restore that maps the page protected again (and sets
  // the flag) must not run between the two steps.
  reg.pages[page].flags.fetch_and(static_cast<uint8_t>(~kPageUnwritten), std::memory_order_relaxed);
  write_faults_.fetch_add(1, std::memory_order_relaxed);
  if (Status s = uffd_.Unprotect(reg.PageAddr(page), reg.page_size); !s.ok()) {
    DegradeLocked(*r, s);  // unregisters: the writer runs on, untiered
  }
}

void MemfdDevice::HandleFault(const uffd_msg& msg, Clock::time_point read_at) {
  const uintptr_t addr = msg.arg.pagefault.address;
  if (msg.arg.pagefault.flags & UFFD_PAGEFAULT_FLAG_WP) {
    // A write to a page mapped write-protected: nothing to bring in.
    HandleWriteFault(addr);
    return;
  }
  // A fault may take the reserve that the policy's spills keep free below
  // the limit; it waits only when that is gone too (the disk falls behind).
  if (host_limit() != 0) WaitForStagingRoom(BasePageSize(), /*engine_waits=*/true);
  const bool minor = (msg.arg.pagefault.flags & UFFD_PAGEFAULT_FLAG_MINOR) != 0;
  const bool write = (msg.arg.pagefault.flags & UFFD_PAGEFAULT_FLAG_WRITE) != 0;
  const size_t base_page = BasePageSize();
  const uintptr_t base_addr = addr & ~(uintptr_t{base_page} - 1);
  std::vector<Evicted> evicted;
  RegionPtr region;
  uint32_t page = 0;
  Tier from = Tier::kDevice;
  uint64_t wait_ns = 0;
  uint32_t ahead = 0;  // never-touched pages after it populated with it
  {
    MutexLock lock(&mu_);
    MemfdRegion* r = FindByAddressLocked(addr);
    if (r == nullptr || r->degraded || r->releasing) {
      // Destroyed or untiered since the touch (or about to be): the waiter
      // refaults, normally once the range is unregistered.
      uffd_.Wake(base_addr, base_page);
      return;
    }
    Region& reg = *r->region;
    page = reg.PageOf(addr);  // relative to the aligned base
    PageRecord& rec = reg.pages[page];
    from = rec.tier.load(std::memory_order_relaxed);
    if (from == Tier::kDevice && (rec.backend & kParkedAhead)) {
      // The first touch of a page read ahead (parked in the memfd): the
      // read paid. The whole page is mapped at once: write-protected for a
      // read where the kernel can (its copy on SSD stays known current),
      // else writable (the copy is then judged by the page's hash when it
      // leaves).
      rec.backend &= ~kParkedAhead;
      Counters::Add(counters_.readahead_used_pages, park_every_);
      LearnAheadLocked(/*paid=*/true);
      bool all = false;
      Status s;
      if (!write && r->protectable && continue_protects_ &&
          (rec.flags.load(std::memory_order_relaxed) & kPageUnwritten)) {
        s = uffd_.ContinueProtected(reg.PageAddr(page), reg.page_size, &all);
        if (!s.ok()) {
          Log(1, "%s: %s; pages read ahead are mapped writable on their first touch", who(),
              s.message().c_str());
          continue_protects_ = false;
        }
      }
      if (!all) {
        rec.flags.fetch_and(static_cast<uint8_t>(~kPageUnwritten), std::memory_order_relaxed);
        s = uffd_.Continue(reg.PageAddr(page), reg.page_size);
      }
      uffd_.Wake(base_addr, base_page);
      if (!s.ok()) DegradeLocked(*r, s);
      return;  // not a miss: the stride guess learns from misses only
    }
    if (restorer_) NoteFaultLocked(reg.PageAddr(page), reg.page_size);
    if (from == Tier::kDevice) {
      // Resolved before this message was handled (a Promote, or a second
      // message for a page just brought in). Map the touched base page in
      // case it is the one missing, then make sure its waiter runs. If this
      // maps it, it is mapped writable, so the page's copy, if any, is no
      // longer known current; if the install mapped it already
      // (write-protected, maybe), the copy stays current.
      bool mapped = false;
      Status s = minor ? uffd_.Continue(base_addr, base_page, &mapped)
                       : uffd_.ZeroFill(base_addr, base_page, &mapped);
      if (!s.ok() || mapped) {
        reg.pages[page].flags.fetch_and(static_cast<uint8_t>(~kPageUnwritten),
                                        std::memory_order_relaxed);
      }
      uffd_.Wake(base_addr, base_page);
      if (!s.ok()) DegradeLocked(*r, s);
      return;
    }
    Status s;
    if (from == Tier::kUntouched && (rec.flags.load(std::memory_order_relaxed) & kPageInFlight)) {
      // A page of zeros being punched out of the memfd (PunchLeftPages):
      // its end wakes this thread, which then faults on a hole.
      return;
    }
    if (from != Tier::kDisk) {
      s = BringInLocked(*r, page, &evicted);
      if (s.ok() && from == Tier::kUntouched && fill_ahead_ > 0) {
        ahead = FillAheadLocked(*r, page + 1, &evicted);
      }
    } else if ((rec.flags.load(std::memory_order_relaxed) & kPageInFlight) &&
               !(restorer_ && fault_threads_ > 1 && TakeBackQueuedLocked(*r, page))) {
      // Another thread is reading this page back (or punching it out of the
      // memfd: PunchLeftPages). Its install wakes every thread waiting on
      // the page, this one's included (and on an error, or after a punch,
      // it wakes them to fault again), so this message needs no read of its
      // own. (With several fault threads, a read the pipeline has queued
      // but cannot start soon is this thread's to do, below: several reads
      // at once. Otherwise the pipeline reads it, maybe with neighbours.)
      coalesced_faults_.fetch_add(1, std::memory_order_relaxed);
      if (restorer_) QueueRestoreLocked(*r, page, read_at, /*read_here=*/false, write);
      return;
    } else {
      // This thread reads the page itself (no hand-off on the way to the
      // waiter); the pipeline reads, then, what the engine touches next. (Not
      // before: on a disk that serves requests in order, this read would
      // wait behind megabytes of them.)
      ++hold_wake_;
      if (restorer_) QueueRestoreLocked(*r, page, read_at, /*read_here=*/true, write);
      s = RestoreLocked(*r, page, &evicted);  // releases the lock to read
      if (--hold_wake_ == 0 && wake_held_) {
        wake_held_ = false;
        WakeRestorerLocked();
      }
    }
    if (!s.ok()) {
      DegradeLocked(*r, s);  // unregisters: the waiter runs on, untiered
    } else {
      // From when the message was read: the kernel does not timestamp
      // faults. Counted under the lock so the books settle with the move.
      wait_ns = static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - read_at).count());
      Counters::Add(counters_.faults);
      Counters::Add(counters_.fault_bytes, reg.page_size);
      Counters::Add(counters_.fault_ns, wait_ns);
      region = r->region;
    }
  }
  Report(evicted);
  if (!region) return;  // not resolved here
  if (events_) {
    events_->OnFault(*region, page, from, wait_ns);
    if (ahead > 0) events_->OnArrivedAhead(*region, page + 1, ahead, Tier::kUntouched);
  }
}

uint32_t MemfdDevice::FillAheadLocked(MemfdRegion& r, uint32_t first,
                                      std::vector<Evicted>* evicted) {
  Region& region = *r.region;
  // Into free room only: pages the engine has not asked for must not push
  // out pages it has.
  const uint64_t resident = resident_bytes_.load(std::memory_order_relaxed);
  const uint64_t free_pages =
      resident < capacity() ? (capacity() - resident) / region.page_size : 0;
  const uint32_t most = static_cast<uint32_t>(std::min<uint64_t>(fill_ahead_, free_pages));
  uint32_t count = 0;
  while (count < most && first + count < region.pages.size()) {
    const PageRecord& rec = region.pages[first + count];
    if (rec.tier.load(std::memory_order_relaxed) != Tier::kUntouched ||
        (rec.flags.load(std::memory_order_relaxed) & kPageInFlight)) {
      break;
    }
    ++count;
  }
  for (uint32_t i = 0; i < count; ++i) {
    // One page at a time: each takes its room, and a failure stops there
    // (the rest are filled by their own first touch).
    if (!BringInLocked(r, first + i, evicted).ok()) return i;
  }
  return count;
}

}  // namespace kvtier
