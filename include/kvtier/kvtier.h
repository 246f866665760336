/* kvtier C API: hints from an engine that wants to cooperate.
 *
 * An engine's scheduler knows which KV blocks the next step reads; passing
 * that as hints turns fault-driven migration into prefetch. The functions are
 * defined by libkvtier.so (LD_PRELOAD). Each returns 0 or a negative errno
 * value; none blocks on data movement (hints are queued for the policy).
 * Thread-safety: every function may be called from any thread. */
#ifndef KVTIER_KVTIER_H_
#define KVTIER_KVTIER_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Hint kinds for kvtier_hint. */
#define KVTIER_HINT_WILL_NEED 1 /* used soon: bring to the device ahead of use */
#define KVTIER_HINT_COLD 2      /* not used for a while: demote first */
#define KVTIER_HINT_PIN 3       /* keep on the device until UNPIN */
#define KVTIER_HINT_UNPIN 4     /* undo PIN */

/* Applies `kind` to every page overlapping [ptr, ptr+len).
 * Returns 0; -EINVAL for an unknown kind; -ENOENT when ptr is not inside a
 * kvtier region; -ENODEV when kvtier is not active in this process. */
int kvtier_hint(const void* ptr, size_t len, int kind);

/* The library's version, "MAJOR.MINOR.PATCH". */
const char* kvtier_version(void);

#ifdef __cplusplus
}
#endif

#endif /* KVTIER_KVTIER_H_ */
