// Whether the calling thread is one kvtier runs itself (the policy thread,
// a backend's fault or maintenance threads). The heap hooks of
// KVTIER_BACKEND=host hand such a thread's allocations straight to the
// allocator: kvtier's own vectors never become tiered blocks, and a fault
// thread never waits on a fault it would have to resolve itself.
// initial-exec: reading it never allocates (see interpose/preload.h).
#pragma once

namespace kvtier {

[[gnu::tls_model("initial-exec")]] constinit inline thread_local bool t_kvtier_thread = false;

// Marks the calling thread for its lifetime; put it first in a thread's body.
inline void MarkKvtierThread() { t_kvtier_thread = true; }

}  // namespace kvtier
