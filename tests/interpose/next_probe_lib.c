/* libnextprobe.so: a library for driver_entry_probe's dlsym(RTLD_NEXT)
 * checks. It defines next_probe_who ("lib"; the program defines its own,
 * "exe") and looks names up with RTLD_NEXT from inside itself, where nothing
 * after it defines next_probe_who. */
#define _GNU_SOURCE
#include <dlfcn.h>

__attribute__((visibility("default"))) const char* next_probe_who(void) { return "lib"; }

/* The result goes through a volatile so the call is no tail call: dlsym's
 * caller must be this library, not whoever called this function. */
__attribute__((visibility("default"))) void* next_probe_lookup_next(const char* name) {
  void* volatile found = dlsym(RTLD_NEXT, name);
  return found;
}
