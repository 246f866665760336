// Linked into every program of the TSan build (cmake/KvtierHelpers.cmake).
//
// Initialises clang's shared TSan runtime before any library constructor
// runs, as clang's static runtime does for itself: without it clang 14's
// shared runtime crashes in libstdc++'s first __cxa_atexit.
//
// And gives the build's defaults, so a test run by hand reports as ctest's
// do (TSAN_OPTIONS still adds to them):
//  - the suppressions file (tests/tsan.supp, empty unless an entry says why);
//  - die_after_fork=0: kvtier starts its threads again in a child of a
//    multi-threaded fork (the CUDA runtime's rules allow a child to use
//    CUDA afresh), which TSan otherwise refuses outright;
//  - second_deadlock_stack=1: both stacks of a lock-order inversion.
void __tsan_init(void);
__attribute__((section(".preinit_array"),
               used)) static void (*kvtier_tsan_preinit)(void) = __tsan_init;

const char* __tsan_default_options(void) {
  return "suppressions=" KVTIER_TSAN_SUPPRESSIONS " die_after_fork=0 second_deadlock_stack=1";
}
