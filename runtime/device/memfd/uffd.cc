// userfaultfd and memfd mechanics for the simulated GPU (see uffd.h).
#include "runtime/device/memfd/uffd.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "runtime/numa_place.h"
#include "runtime/va_range.h"

#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif

namespace kvtier {
namespace {

// EAGAIN without progress only happens while the address space changes
// under a non-cooperative event; a bounded retry keeps a bug from spinning.
constexpr int kMaxAgain = 10000;

// UFFDIO_CONTINUE_MODE_WP (Linux 6.4), which older headers lack.
#ifdef UFFDIO_CONTINUE_MODE_WP
constexpr uint64_t kContinueModeWp = UFFDIO_CONTINUE_MODE_WP;
#else
constexpr uint64_t kContinueModeWp = uint64_t{1} << 1;
#endif

const char* OpName(int op) {
  static const char* const kNames[] = {"UFFDIO_CONTINUE", "UFFDIO_ZEROPAGE", "UFFDIO_COPY",
                                       "UFFDIO_COPY (write-protected)",
                                       "UFFDIO_CONTINUE (write-protected)"};
  return kNames[op];
}

int NewUffd(int flags) { return static_cast<int>(syscall(SYS_userfaultfd, flags)); }

}  // namespace

UserFaultFd::~UserFaultFd() {
  if (fd_ >= 0) close(fd_);
}

UserFaultFd::UserFaultFd(UserFaultFd&& other) noexcept { *this = std::move(other); }

UserFaultFd& UserFaultFd::operator=(UserFaultFd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    user_mode_only_ = other.user_mode_only_;
    write_protect_ = other.write_protect_;
    origin_ = other.origin_;
  }
  return *this;
}

// Opens the descriptor into u (fd, origin, user-mode-only); returns 0 or
// the errno of the first attempt.
int UserFaultFd::OpenFd(UserFaultFd& u) {
  const int flags = O_CLOEXEC | O_NONBLOCK;
  u.fd_ = NewUffd(flags);
  u.origin_ = "userfaultfd(2)";
  u.user_mode_only_ = false;
  const int first_errno = u.fd_ < 0 ? errno : 0;
  if (u.fd_ < 0 && first_errno == EPERM) {
    // Unprivileged: /dev/userfaultfd is governed by file permissions instead
    // of vm.unprivileged_userfaultfd (Linux 6.1+).
    int dev = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
    if (dev >= 0) {
      u.fd_ = ioctl(dev, USERFAULTFD_IOC_NEW, flags);
      u.origin_ = "/dev/userfaultfd";
      close(dev);
    }
  }
  if (u.fd_ < 0 && first_errno == EPERM) {
    // Always allowed (Linux 5.11+): catches the engine's own touches, which
    // is all the simulated GPU needs.
    u.fd_ = NewUffd(flags | UFFD_USER_MODE_ONLY);
    u.origin_ = "userfaultfd(2), user-mode faults only";
    u.user_mode_only_ = true;
  }
  return u.fd_ < 0 ? first_errno : 0;
}

Result<UserFaultFd> UserFaultFd::Open() {
  UserFaultFd u;
  if (const int first_errno = OpenFd(u); first_errno != 0) {
    if (first_errno == ENOSYS) {
      return Status::Error(
          "userfaultfd is not available (ENOSYS): the kernel lacks CONFIG_USERFAULTFD, or a "
          "seccomp profile forbids it, as container runtimes' defaults do (the simulated GPU "
          "and the host backend need it: use a kernel built with it, or allow userfaultfd)");
    }
    if (first_errno == EPERM) {
      return Status::Errorf(
          "userfaultfd is not permitted for this process (vm.unprivileged_userfaultfd=0, no "
          "CAP_SYS_PTRACE, no access to /dev/userfaultfd, user-mode-only mode refused: %s): run "
          "as root, or set sysctl vm.unprivileged_userfaultfd=1, or grant this user read/write "
          "on /dev/userfaultfd",
          strerror(errno));
    }
    return Status::Errorf(
        "userfaultfd(2) failed: %s (the simulated GPU and the host backend need it)",
        strerror(first_errno));
  }
  uffdio_api api{};
  api.api = UFFD_API;
  api.features = UFFD_FEATURE_MINOR_SHMEM;
  if (!u.user_mode_only_) {
    // Write protection on shmem where the kernel has it; a descriptor whose
    // handshake failed cannot try again, so without it a new one is opened.
    api.features |= UFFD_FEATURE_WP_HUGETLBFS_SHMEM;
    if (ioctl(u.fd_, UFFDIO_API, &api) == 0) {
      u.write_protect_ = true;
      return u;
    }
    close(u.fd_);
    u.fd_ = -1;
    if (const int e = OpenFd(u); e != 0) {
      return Status::Errorf("userfaultfd(2) failed on the second try: %s", strerror(e));
    }
    api = {};
    api.api = UFFD_API;
    api.features = UFFD_FEATURE_MINOR_SHMEM;
  }
  if (ioctl(u.fd_, UFFDIO_API, &api) != 0) {
    return Status::Errorf(
        "userfaultfd on this kernel lacks MINOR faults on shared memory "
        "(UFFD_FEATURE_MINOR_SHMEM, Linux 5.14 or newer): %s; the simulated GPU and the host "
        "backend need them",
        strerror(errno));
  }
  return u;
}

Status UserFaultFd::Register(uintptr_t start, size_t len, bool* zeropage, bool* protectable) const {
  uffdio_register reg{};
  reg.range.start = start;
  reg.range.len = len;
  reg.mode = UFFDIO_REGISTER_MODE_MISSING | UFFDIO_REGISTER_MODE_MINOR;
  if (write_protect_) {
    reg.mode |= UFFDIO_REGISTER_MODE_WP;
    if (ioctl(fd_, UFFDIO_REGISTER, &reg) != 0) {
      reg.mode &= ~UFFDIO_REGISTER_MODE_WP;  // then without it
    }
  }
  if (!(reg.mode & UFFDIO_REGISTER_MODE_WP) && ioctl(fd_, UFFDIO_REGISTER, &reg) != 0) {
    return Status::Errorf("UFFDIO_REGISTER of %zu bytes at %#lx failed: %s", len,
                          static_cast<unsigned long>(start), strerror(errno));
  }
  if (!(reg.ioctls & (uint64_t{1} << _UFFDIO_CONTINUE))) {
    Status s = Unregister(start, len);
    (void)s;
    return Status::Error("UFFDIO_CONTINUE is not supported on memfd mappings on this kernel");
  }
  *zeropage = (reg.ioctls & (uint64_t{1} << _UFFDIO_ZEROPAGE)) != 0;
  *protectable = (reg.mode & UFFDIO_REGISTER_MODE_WP) &&
                 (reg.ioctls & (uint64_t{1} << _UFFDIO_WRITEPROTECT)) != 0;
  return Status::Ok();
}

Status UserFaultFd::Unregister(uintptr_t start, size_t len) const {
  uffdio_range range{start, len};
  if (ioctl(fd_, UFFDIO_UNREGISTER, &range) != 0) {
    return Status::Errorf("UFFDIO_UNREGISTER of %zu bytes at %#lx failed: %s", len,
                          static_cast<unsigned long>(start), strerror(errno));
  }
  return Status::Ok();
}

Status UserFaultFd::Continue(uintptr_t start, size_t len, bool* mapped) const {
  return Fill(Op::kContinue, start, len, nullptr, nullptr, mapped);
}
Status UserFaultFd::ContinueProtected(uintptr_t start, size_t len, bool* all) const {
  bool skipped = false;
  Status s = Fill(Op::kContinueProtected, start, len, nullptr, &skipped);
  *all = s.ok() && !skipped;
  return s;
}
Status UserFaultFd::ZeroFill(uintptr_t start, size_t len, bool* mapped) const {
  return Fill(Op::kZero, start, len, nullptr, nullptr, mapped);
}
Status UserFaultFd::Copy(uintptr_t start, size_t len, const void* src) const {
  return Fill(Op::kCopy, start, len, src);
}
Status UserFaultFd::CopyProtected(uintptr_t start, size_t len, const void* src, bool* all) const {
  bool skipped = false;
  Status s = Fill(Op::kCopyProtected, start, len, src, &skipped);
  *all = s.ok() && !skipped;
  return s;
}
Status UserFaultFd::WriteProtect(uintptr_t start, size_t len) const {
  return Protect(start, len, true);
}
Status UserFaultFd::Unprotect(uintptr_t start, size_t len) const {
  return Protect(start, len, false);
}

Status UserFaultFd::Protect(uintptr_t start, size_t len, bool protect) const {
  uffdio_writeprotect wp{};
  wp.range = {start, len};
  wp.mode = protect ? UFFDIO_WRITEPROTECT_MODE_WP : 0;
  for (int again = 0; ioctl(fd_, UFFDIO_WRITEPROTECT, &wp) != 0;) {
    if (errno != EAGAIN || ++again >= kMaxAgain) {
      return Status::Errorf("UFFDIO_WRITEPROTECT (%s) of %zu bytes at %#lx failed: %s",
                            protect ? "protect" : "unprotect", len,
                            static_cast<unsigned long>(start), strerror(errno));
    }
    sched_yield();
  }
  return Status::Ok();
}

void UserFaultFd::Wake(uintptr_t start, size_t len) const {
  uffdio_range range{start, len};
  (void)ioctl(fd_, UFFDIO_WAKE, &range);
}

int UserFaultFd::Ioctl(Op op, uintptr_t start, size_t len, const void* src, size_t* done) const {
  int rc = 0;
  int64_t progress = 0;
  switch (op) {
    case Op::kContinue:
    case Op::kContinueProtected: {
      uffdio_continue c{};
      c.range = {start, len};
      c.mode = op == Op::kContinueProtected ? kContinueModeWp : 0;
      rc = ioctl(fd_, UFFDIO_CONTINUE, &c);
      progress = c.mapped;
      break;
    }
    case Op::kZero: {
      uffdio_zeropage z{};
      z.range = {start, len};
      rc = ioctl(fd_, UFFDIO_ZEROPAGE, &z);
      progress = z.zeropage;
      break;
    }
    case Op::kCopy:
    case Op::kCopyProtected: {
      uffdio_copy c{};
      c.dst = start;
      c.src = reinterpret_cast<uintptr_t>(src);
      c.len = len;
      c.mode = op == Op::kCopyProtected ? UFFDIO_COPY_MODE_WP : 0;
      rc = ioctl(fd_, UFFDIO_COPY, &c);
      progress = c.copy;
      break;
    }
  }
  if (rc == 0) {
    *done = len;
    return 0;
  }
  const int err = errno;
  *done = progress > 0 ? static_cast<size_t>(progress) : 0;
  return -err;
}

Status UserFaultFd::Fill(Op op, uintptr_t start, size_t len, const void* src, bool* skipped_out,
                         bool* mapped_out) const {
  const size_t base_page = BasePageSize();
  size_t off = 0;
  bool skipped = false;
  if (mapped_out != nullptr) *mapped_out = false;
  int again = 0;
  while (off < len) {
    size_t done = 0;
    const void* from = src ? static_cast<const uint8_t*>(src) + off : nullptr;
    const int err = Ioctl(op, start + off, len - off, from, &done);
    off += done;
    if (err == 0 || done > 0) {
      if (mapped_out != nullptr) *mapped_out = true;
      again = 0;
      continue;  // done, or partial progress (reported as EAGAIN): carry on
    }
    if (err == -EAGAIN && ++again < kMaxAgain) {
      sched_yield();
      continue;
    }
    if (err == -EEXIST) {
      // The next base page is mapped already (a racing resolver), or, for a
      // zero/copy fill, already has bytes in the memfd: map those instead of
      // failing, and skip what is mapped.
      if (op != Op::kContinue && op != Op::kContinueProtected) {
        size_t d = 0;
        const int e = Ioctl(Op::kContinue, start + off, base_page, nullptr, &d);
        if (e != 0 && e != -EEXIST) {
          return Status::Errorf("%s at %#lx found bytes in the memfd; mapping them failed: %s",
                                OpName(static_cast<int>(op)),
                                static_cast<unsigned long>(start + off), strerror(-e));
        }
        if (e == 0 && mapped_out != nullptr) *mapped_out = true;
      }
      off += base_page;
      skipped = true;
      continue;
    }
    return Status::Errorf("%s of %zu bytes at %#lx failed: %s", OpName(static_cast<int>(op)),
                          len - off, static_cast<unsigned long>(start + off), strerror(-err));
  }
  // Skipped addresses were never woken by an install of ours.
  if (skipped) Wake(start, len);
  if (skipped_out != nullptr) *skipped_out = skipped;
  return Status::Ok();
}

Result<ShmViews> ShmViews::Create(size_t bytes, size_t align, const std::string& name,
                                  VaRange* range) {
  ShmViews v;
  v.memfd = memfd_create(name.c_str(), MFD_CLOEXEC);
  if (v.memfd < 0) {
    return Status::Errorf("memfd_create(%s) failed: %s", name.c_str(), strerror(errno));
  }
  v.bytes = bytes;
  if (ftruncate(v.memfd, static_cast<off_t>(bytes)) != 0) {
    Status s = Status::Errorf("sizing memfd %s to %zu bytes failed: %s", name.c_str(), bytes,
                              strerror(errno));
    v.Release();
    return s;
  }
  if (range != nullptr) {
    // Inside the range: the span is PROT_NONE and ours until given back.
    Result<uintptr_t> span = range->Take(bytes, align);
    if (!span.ok()) {
      v.Release();
      return span.status();
    }
    void* engine = mmap(reinterpret_cast<void*>(span.value()), bytes, PROT_READ | PROT_WRITE,
                        MAP_SHARED | MAP_FIXED, v.memfd, 0);
    if (engine == MAP_FAILED) {
      Status s = Status::Errorf("mapping memfd %s (%zu bytes) failed: %s", name.c_str(), bytes,
                                strerror(errno));
      range->Give(span.value(), bytes);
      v.Release();
      return s;
    }
    v.engine = static_cast<uint8_t*>(engine);
    v.range = range;
  } else {
    // Reserve size + align of address space, then place the shared view at
    // the aligned address inside it and give back the slack on both sides.
    const size_t reserve = bytes + align;
    void* area =
        mmap(nullptr, reserve, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (area == MAP_FAILED) {
      Status s = Status::Errorf("reserving %zu bytes of address space for %s failed: %s", reserve,
                                name.c_str(), strerror(errno));
      v.Release();
      return s;
    }
    const uintptr_t lo = reinterpret_cast<uintptr_t>(area);
    const uintptr_t aligned = (lo + align - 1) & ~(uintptr_t{align} - 1);
    void* engine = mmap(reinterpret_cast<void*>(aligned), bytes, PROT_READ | PROT_WRITE,
                        MAP_SHARED | MAP_FIXED, v.memfd, 0);
    if (engine == MAP_FAILED) {
      Status s = Status::Errorf("mapping memfd %s (%zu bytes) failed: %s", name.c_str(), bytes,
                                strerror(errno));
      munmap(area, reserve);
      v.Release();
      return s;
    }
    if (aligned > lo) munmap(area, aligned - lo);
    const uintptr_t end = aligned + bytes;
    if (lo + reserve > end) munmap(reinterpret_cast<void*>(end), lo + reserve - end);
    v.engine = static_cast<uint8_t*>(engine);
  }

  // The memfd's pages, whichever view faults them in, on kvtier's NUMA node
  // (a placement on a shared mapping is the memfd's own).
  PlaceOnMemoryNode(v.engine, bytes);
  void* alias = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, v.memfd, 0);
  if (alias == MAP_FAILED) {
    Status s = Status::Errorf("mapping the alias view of memfd %s failed: %s", name.c_str(),
                              strerror(errno));
    v.Release();
    return s;
  }
  v.alias = static_cast<uint8_t*>(alias);
  return v;
}

void ShmViews::Release() {
  if (engine && range) {
    range->Give(reinterpret_cast<uintptr_t>(engine), bytes);
  } else if (engine) {
    munmap(engine, bytes);
  }
  range = nullptr;
  if (alias) munmap(alias, bytes);
  if (memfd >= 0) close(memfd);
  engine = alias = nullptr;
  memfd = -1;
}

}  // namespace kvtier
