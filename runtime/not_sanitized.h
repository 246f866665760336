// KVTIER_NOT_SANITIZED: code that runs before the sanitizer runtimes have
// started, built without their instrumentation.
//
// Two paths of libkvtier.so run that early: the dlsym hook (the sanitizer
// runtimes look their interceptors up with dlsym(RTLD_NEXT) while they
// start) and the heap hooks of interpose/host_alloc.cc (the loader and the
// sanitizer runtime allocate before either has started). Instrumented code
// there would touch shadow memory or thread state that does not exist yet.
// Everything such a function calls must be not sanitized too, or inlined
// into it: std::atomic's member functions are calls in an unoptimised
// build, so these paths use the __atomic builtins on plain variables.
#pragma once

// clang's disable_sanitizer_instrumentation also drops TSan's atomic and
// function entry hooks, which no_sanitize("thread") keeps.
#if defined(__clang__) && __has_attribute(disable_sanitizer_instrumentation)
#define KVTIER_NOT_SANITIZED \
  __attribute__((no_sanitize("address", "undefined", "thread"), disable_sanitizer_instrumentation))
#else
#define KVTIER_NOT_SANITIZED __attribute__((no_sanitize("address", "undefined")))
#endif
