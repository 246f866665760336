// DlsymHook: kvtier's dlsym, the way engines and the CUDA runtime reach the
// CUDA driver without the dynamic linker.
//
// The problem. LD_PRELOAD interposes only what a program resolves through the
// dynamic linker's global scope. libcudart (shared or statically linked into
// the program) dlopens libcuda.so.1 and looks up cuGetProcAddress_v2 (and a
// few others) with dlsym on that handle, then gets every other driver
// function from cuGetProcAddress; PyTorch gets its driver table from
// cudaGetDriverEntryPoint, which goes the same way. dlsym on a specific handle
// searches that library and its dependencies only, never the preloaded
// library, so without help kvtier's driver hooks would see none of this.
//
// The alternatives, weighed:
//  - Hook only cudaGetDriverEntryPoint[ByVersion] and export the driver
//    symbols: covers PyTorch's table and programs linked with -lcuda, but not
//    libcudart's own driver calls, and nothing at all of a program with a
//    statically linked runtime. Kept (driver_entry.cc), not enough alone.
//  - An audit library (LD_AUDIT, la_symbind64): sees dlsym lookups too, but
//    needs a second environment variable and a second library, puts every
//    PLT binding of the process through the audit interface, and audit
//    modules have a history of loader bugs. Rejected as the main path.
//  - dlopen interposition that hands out a shim "libcuda" forwarding some 700
//    driver symbols: large, and must be regenerated for every CUDA release.
//    Rejected.
//  - Override dlsym, as HAMi-core does. Its known failures: deadlocks, when
//    the override takes locks or runs initialisation (logging, config,
//    pthread_once) from inside dlsym, which the loader, the sanitizer runtime
//    and other libraries' constructors call at awkward times; and broken
//    RTLD_NEXT, because glibc's dlsym finds "the next object" from its own
//    return address, which becomes the interposer's.
//
// Chosen: override dlsym, narrowly, with both failure modes designed out.
//  - dlsym(RTLD_NEXT, ...) and dlsym(RTLD_DEFAULT, ...) are not handled at
//    all: a few instructions of assembly jump (not call) to libc's dlsym, so
//    libc sees the original caller's return address and RTLD_NEXT and
//    dlmopen namespaces keep their meaning. Hooked driver symbols looked up
//    that way already resolve to kvtier's exported definitions.
//  - With an explicit handle, libc's dlsym does the lookup (its caller does
//    not matter there); then, only when the name is a hooked driver function
//    and the pointer found is exactly the real function kvtier's wrapper
//    calls, the wrapper is returned (driver_entry.h). Everything else,
//    including a failed lookup and its dlerror() text, is libc's answer.
//  - The override takes no lock, allocates nothing, starts nothing (not the
//    runtime, not the options) and calls nothing that could call dlsym back
//    into itself: libc's dlsym is found once with dlvsym(RTLD_NEXT), which is
//    not overridden (runtime/device/cuda/real_dl.h), and kvtier's own lookups
//    use libc's dlsym directly.
// The CUDA runtime's cuGetProcAddress then reaches kvtier's cuGetProcAddress
// wrapper, which hands back wrappers for the hooked functions and the real
// pointers for everything else (cuGraph*, cuGetExportTable, ...).
// x86-64 and AArch64; elsewhere dlsym is not overridden and the driver hooks
// see only the dynamic linker and cudaGetDriverEntryPoint.
// Thread-safety: any thread, lock-free.
#include <dlfcn.h>

#include "interpose/driver_entry.h"
#include "runtime/device/cuda/real_dl.h"

extern "C" {

// The two entry points the assembly below calls. Hidden: they are no part of
// the library's interface.
// Not sanitized: see real_dl.h (the sanitizer runtimes call dlsym while they
// start).
KVTIER_NOT_SANITIZED __attribute__((visibility("hidden"), used)) void* kvtier_dlsym_explicit(
    void* handle, const char* name) {
  void* real = kvtier::cuda::RealDlsym(handle, name);
  // Only hooked driver names go further (no sanitizer asks for those).
  if (real == nullptr || name == nullptr || name[0] != 'c' || name[1] != 'u') return real;
  return kvtier::interpose::WrapperForSymbol(name, real);
}

KVTIER_NOT_SANITIZED __attribute__((visibility("hidden"), used)) void* kvtier_dlsym_libc() {
  return reinterpret_cast<void*>(kvtier::cuda::RealDlsymFunction());
}

}  // extern "C"

// dlsym(handle, name): RTLD_NEXT ((void*)-1) and RTLD_DEFAULT (0) tail-jump to
// libc's dlsym with the caller's return address intact; explicit handles
// tail-jump to kvtier_dlsym_explicit.
#if defined(__x86_64__)
asm(R"(
  .text
  .globl dlsym
  .type dlsym, @function
  .p2align 4
dlsym:
  .cfi_startproc
  endbr64
  cmpq $-1, %rdi
  je 1f
  testq %rdi, %rdi
  je 1f
  jmp kvtier_dlsym_explicit
1:
  pushq %rdi
  .cfi_adjust_cfa_offset 8
  pushq %rsi
  .cfi_adjust_cfa_offset 8
  subq $8, %rsp
  .cfi_adjust_cfa_offset 8
  call kvtier_dlsym_libc
  addq $8, %rsp
  .cfi_adjust_cfa_offset -8
  popq %rsi
  .cfi_adjust_cfa_offset -8
  popq %rdi
  .cfi_adjust_cfa_offset -8
  testq %rax, %rax
  je 2f
  jmp *%rax
2:
  ret
  .cfi_endproc
  .size dlsym, .-dlsym
)");
#elif defined(__aarch64__)
asm(R"(
  .text
  .globl dlsym
  .type dlsym, %function
  .p2align 4
dlsym:
  .cfi_startproc
  cmn x0, #1
  b.eq 1f
  cbz x0, 1f
  b kvtier_dlsym_explicit
1:
  stp x29, x30, [sp, #-32]!
  .cfi_def_cfa_offset 32
  .cfi_offset 29, -32
  .cfi_offset 30, -24
  mov x29, sp
  stp x0, x1, [sp, #16]
  bl kvtier_dlsym_libc
  mov x16, x0
  ldp x0, x1, [sp, #16]
  ldp x29, x30, [sp], #32
  .cfi_restore 29
  .cfi_restore 30
  .cfi_def_cfa_offset 0
  cbz x16, 2f
  br x16
2:
  mov x0, #0
  ret
  .cfi_endproc
  .size dlsym, .-dlsym
)");
#endif
