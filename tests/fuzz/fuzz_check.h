// FUZZ_CHECK: a property a fuzz target asserts. Unlike assert it stays in
// release builds, so the corpus replay of every build checks it too.
#pragma once

#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(cond)                                                            \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      fprintf(stderr, "%s:%d: fuzz check failed: %s\n", __FILE__, __LINE__, #cond); \
      abort();                                                                      \
    }                                                                               \
  } while (0)
