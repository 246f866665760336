// Whether the calling thread is one kvtier runs itself (the policy thread,
// a backend's fault or maintenance threads). The heap hooks of
// KVTIER_BACKEND=host hand such a thread's allocations straight to the
// allocator: kvtier's own vectors never become tiered blocks, and a fault
// thread never waits on a fault it would have to resolve itself.
// initial-exec: reading it never allocates (see interpose/preload.h).
#pragma once

#include <signal.h>

namespace kvtier {

[[gnu::tls_model("initial-exec")]] constinit inline thread_local bool t_kvtier_thread = false;

// Marks the calling thread for its lifetime; put it first in a thread's body.
inline void MarkKvtierThread() { t_kvtier_thread = true; }

// Blocks every asynchronous signal on the calling thread (the old mask goes
// to *old); threads started meanwhile inherit the mask. An engine signal
// handler that ran on a kvtier thread and touched a non-resident page would
// wait on the thread that should resolve it, or on itself, forever.
// Synchronous signals stay open so a crash still reports.
inline void BlockAsyncSignals(sigset_t* old) {
  sigset_t all;
  sigfillset(&all);
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT}) sigdelset(&all, sig);
  pthread_sigmask(SIG_SETMASK, &all, old);
}

}  // namespace kvtier
