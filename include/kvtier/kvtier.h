/* kvtier C API: hints from an engine that wants to cooperate.
 *
 * An engine's scheduler knows which KV blocks the next step reads; passing
 * that as hints turns fault-driven migration into prefetch. The functions are
 * defined by libkvtier.so (LD_PRELOAD). Each returns 0 or a negative errno
 * value. kvtier_hint never waits for data to move (hints are queued for the
 * policy), with one exception: waking a DORMANT range whose pages are on SSD
 * where kvtier cannot hold the GPU's work back (see KVTIER_HINT_WILL_NEED).
 * kvtier_wait waits by design.
 * Thread-safety: every function may be called from any thread. */
#ifndef KVTIER_KVTIER_H_
#define KVTIER_KVTIER_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Hint kinds for kvtier_hint. */
#define KVTIER_HINT_WILL_NEED                                                          \
  1                         /* used soon: bring to the device ahead of use (the policy \
                               ticks early for it, not at its next period) */
#define KVTIER_HINT_COLD 2  /* not used for a while: demote first */
#define KVTIER_HINT_PIN 3   /* keep on the device until UNPIN */
#define KVTIER_HINT_UNPIN 4 /* undo PIN */
/* The engine promises not to touch the range (no kernel, copy or set reads
 * or writes it) until it wakes it with KVTIER_HINT_WILL_NEED or kvtier_wait:
 * the KV blocks of a parked session. kvtier demotes it first and may spill
 * it to SSD even on a GPU, where it cannot see kernels touch memory. A
 * wakened range is back before the engine's next GPU work runs (kvtier
 * holds that work until it is); where kvtier cannot hold GPU work (no CUPTI
 * callbacks, e.g. under a profiler) WILL_NEED brings it back before it
 * returns. */
#define KVTIER_HINT_DORMANT 5

/* Applies `kind` to every page overlapping [ptr, ptr+len).
 * Returns 0; -EINVAL for an unknown kind; -ENOENT when ptr is not inside a
 * kvtier region; -ENODEV when kvtier is not active in this process; -EIO
 * when waking a dormant range had to restore it and could not (the pages
 * are where they were). */
int kvtier_hint(const void* ptr, size_t len, int kind);

/* Wakes [ptr, ptr+len) (as KVTIER_HINT_WILL_NEED) and returns once none of
 * its pages is on SSD: for an engine that wants the bytes back before it
 * schedules the session. Returns 0; -ENOENT when ptr is not inside a kvtier
 * region; -ENODEV when kvtier is not active in this process; -EIO when a
 * move failed (the pages are where they were). */
int kvtier_wait(const void* ptr, size_t len);

/* The library's version, "MAJOR.MINOR.PATCH". */
const char* kvtier_version(void);

#ifdef __cplusplus
}
#endif

#endif /* KVTIER_KVTIER_H_ */
