// UserFaultFd: the raw userfaultfd mechanics the simulated GPU runs on, and
// ShmViews: the memfd with its two mappings that back one simulated region.
//
// One userfaultfd per MemfdDevice serves every region. Ranges are registered in
// MISSING and MINOR mode: a touch of a page that has no bytes yet (a hole in
// the memfd) raises MISSING, a touch of a page whose bytes are in the memfd
// but whose PTEs were zapped raises MINOR. Where the kernel write-protects
// shmem (Linux 5.19+) and kernel-mode faults are caught too, also in WP
// mode: a write to a page mapped write-protected raises a WP fault, which is
// how the disk tier learns that a page it holds a copy of has changed. The install calls below
// cover a whole range and are robust against partial states: they retry EAGAIN, continue past PTEs
// that already exist (EEXIST) and then wake every thread waiting in the range, so a faulting thread
// is never left asleep. Thread-safety: the ioctls are safe from any thread (the kernel serialises
// them per mm); the object itself is immutable after Open.
#pragma once

#include <linux/userfaultfd.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/status.h"

namespace kvtier {

// The kernel's base page size. Read each time (glibc keeps it, no system
// call) rather than cached in a function-local static: a fork while another
// thread runs that static's first initialization leaves the child's guard
// pending for ever, and the child's fault thread hangs on its first fault.
inline size_t BasePageSize() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }

class UserFaultFd {
 public:
  UserFaultFd() = default;
  ~UserFaultFd();
  UserFaultFd(UserFaultFd&& other) noexcept;
  UserFaultFd& operator=(UserFaultFd&& other) noexcept;
  UserFaultFd(const UserFaultFd&) = delete;
  UserFaultFd& operator=(const UserFaultFd&) = delete;

  // Opens a non-blocking, close-on-exec userfaultfd with MINOR faults on
  // shmem. Tries the userfaultfd syscall, then /dev/userfaultfd, then the
  // syscall limited to user-mode faults (allowed without privilege). The
  // error says how to make it available.
  static Result<UserFaultFd> Open();

  int fd() const { return fd_; }
  // True when only user-mode faults are caught: a kernel access (e.g. write(2)
  // from a non-resident page) then fails with EFAULT instead of waiting.
  bool user_mode_only() const { return user_mode_only_; }
  // How the descriptor was obtained, for the verbose log.
  const char* origin() const { return origin_; }
  // True when ranges can be registered for write-protect faults too. Off
  // with user-mode-only faults: a kernel write (read(2) into the buffer) to
  // a protected page would fail with EFAULT instead of waiting.
  bool write_protect() const { return write_protect_; }

  // Registers [start, start+len) for MISSING and MINOR faults, and WP faults
  // where write_protect(). Fails when the kernel cannot resolve MINOR faults
  // there (UFFDIO_CONTINUE). Sets *zeropage to whether UFFDIO_ZEROPAGE works
  // on the range and *protectable to whether UFFDIO_WRITEPROTECT does.
  Status Register(uintptr_t start, size_t len, bool* zeropage, bool* protectable) const;
  // Unregisters the range; waiting threads are woken and fault normally.
  Status Unregister(uintptr_t start, size_t len) const;

  // Maps the page-cache pages of a range (MINOR resolution). *mapped (if
  // given): whether this call mapped any base page (false when all were
  // mapped already, by a racing resolver).
  Status Continue(uintptr_t start, size_t len, bool* mapped = nullptr) const;
  // Continue, mapping the pages write-protected (the range must be
  // registered protectable; UFFDIO_CONTINUE_MODE_WP, Linux 6.4 or newer: an
  // older kernel fails it with EINVAL). *all as for CopyProtected.
  Status ContinueProtected(uintptr_t start, size_t len, bool* all) const;
  // Fills holes in a range with zeroed pages (MISSING resolution), mapping
  // instead any page that already has bytes in the memfd. *mapped: as for
  // Continue.
  Status ZeroFill(uintptr_t start, size_t len, bool* mapped = nullptr) const;
  // Fills holes with bytes copied from `src` (MISSING resolution; also the
  // disk tier's restore), mapping instead any page that already has bytes.
  Status Copy(uintptr_t start, size_t len, const void* src) const;
  // Copy, mapping the pages write-protected (the range must be registered
  // protectable): the first write to each raises a WP fault. *all is false
  // when some base page already had bytes in the memfd and was mapped
  // writable instead.
  Status CopyProtected(uintptr_t start, size_t len, const void* src, bool* all) const;
  // Write-protects the range's mapped pages (its unmapped ones raise MINOR
  // or MISSING faults as before).
  Status WriteProtect(uintptr_t start, size_t len) const;
  // Lifts write protection from the range and wakes the threads waiting on
  // it (a WP fault's resolution).
  Status Unprotect(uintptr_t start, size_t len) const;
  // Wakes threads waiting on faults in the range; errors are ignored (the
  // range may be gone).
  void Wake(uintptr_t start, size_t len) const;

 private:
  enum class Op { kContinue, kZero, kCopy, kCopyProtected, kContinueProtected };
  static int OpenFd(UserFaultFd& u);
  // *skipped (if given): whether some base page was found mapped or with
  // bytes in the memfd, and mapped as it was instead. *mapped (if given):
  // whether this call mapped any base page.
  Status Fill(Op op, uintptr_t start, size_t len, const void* src, bool* skipped = nullptr,
              bool* mapped = nullptr) const;
  Status Protect(uintptr_t start, size_t len, bool protect) const;
  // One ioctl; returns 0, or -errno with *done set to the bytes it did.
  int Ioctl(Op op, uintptr_t start, size_t len, const void* src, size_t* done) const;

  int fd_ = -1;
  bool user_mode_only_ = false;
  bool write_protect_ = false;
  const char* origin_ = "none";
};

// A memfd of whole pages with two shared mappings: `engine` (aligned to the
// page size; the one registered with userfaultfd and handed to the engine)
// and `alias` (never registered: kvtier's own access to the bytes, e.g. for
// the disk tier). Never read or write the alias of a page that has no bytes
// yet (untouched or spilled): that would allocate it in the memfd behind the
// residency bookkeeping.
class VaRange;

struct ShmViews {
  int memfd = -1;
  uint8_t* engine = nullptr;
  uint8_t* alias = nullptr;
  size_t bytes = 0;          // length of the memfd and of both views
  VaRange* range = nullptr;  // where the engine view was placed; null: anywhere

  // Creates the memfd (`name` shows in /proc/<pid>/maps) and both views. With
  // `range`, the engine view is placed inside it (the host backend's blocks).
  static Result<ShmViews> Create(size_t bytes, size_t align, const std::string& name,
                                 VaRange* range = nullptr);
  // Unmaps both views and closes the memfd. Idempotent.
  void Release();
};

}  // namespace kvtier
