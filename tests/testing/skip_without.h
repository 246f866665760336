// Tests that need something of the machine (userfaultfd, a tmpfs /dev/shm)
// skip where it is missing on a developer's machine; under CI=true they fail
// instead, so a CI machine that blocks it cannot pass with the code untested.
// .ci/run sets CI=true.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

namespace kvtier::testing {

inline bool InCi() {
  const char* ci = getenv("CI");
  return ci != nullptr && strcmp(ci, "true") == 0;
}

}  // namespace kvtier::testing

// Skips the test (fails it under CI=true); `message` is streamed, e.g.
// KVTIER_SKIP_WITHOUT("userfaultfd: " << why). Returns from the test body.
#define KVTIER_SKIP_WITHOUT(message)                                                      \
  do {                                                                                    \
    if (::kvtier::testing::InCi()) {                                                      \
      GTEST_FAIL() << "CI=true, and this machine lacks what the test needs: " << message; \
    } else {                                                                              \
      GTEST_SKIP() << message;                                                            \
    }                                                                                     \
  } while (0)
