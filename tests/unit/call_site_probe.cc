// A shared library whose exported functions call back into the test: a
// stack with frames outside the test's own object, for CallSite to walk.
#include "tests/unit/call_site_probe.h"

namespace {
volatile int g_after_call = 0;  // work after each call: no tail call drops a frame
}

extern "C" __attribute__((noinline, visibility("default"))) bool kvtier_probe_inner(
    bool (*callback)(void*), void* arg) {
  const bool r = callback(arg);
  g_after_call = g_after_call + 1;
  return r;
}

extern "C" __attribute__((noinline, visibility("default"))) bool kvtier_probe_outer(
    bool (*callback)(void*), void* arg) {
  const bool r = kvtier_probe_inner(callback, arg);
  g_after_call = g_after_call + 1;
  return r;
}
